//! `IOC_STATS`, served: the mount's figures as one JSON object, the text
//! `stitchfs stats` prints. The field names are documented in
//! `docs/stats.md` and only grow within an API version. And `IOC_GRAPH`:
//! the live patch graph as Graphviz DOT (`stitchfs graph`).

use super::callers::check_version;
use super::{OpResult, StitchFuse};
use fuser::Errno;
use serde_json::{json, Map, Value};
use stitch_control::{Text, Wire, TEXT_MAX};

impl StitchFuse {
    /// `IOC_STATS`: the figures, if they fit the answer (they do by far:
    /// a few kilobytes against sixteen).
    pub(super) fn stats_call(&self, input: &[u8]) -> OpResult<Vec<u8>> {
        let asked = Text::from_bytes(input).ok_or(Errno::EINVAL)?;
        check_version(asked.version)?;
        // Processes that exited since the last prune still count, with
        // the patchgroups they held: drop them first, so the figures are
        // of live processes.
        self.callers.prune();
        let text = self.figures()?.to_string();
        Ok(Text::of(&text).ok_or(Errno::EOVERFLOW)?.to_bytes())
    }

    /// `IOC_GRAPH`: every uncommitted patch and its dependencies, or, when
    /// that does not fit the answer, the summary by block with as many
    /// blocks as fit.
    pub(super) fn graph_call(&self, input: &[u8]) -> OpResult<Vec<u8>> {
        let asked = Text::from_bytes(input).ok_or(Errno::EINVAL)?;
        check_version(asked.version)?;
        let dot = self
            .fs
            .with_disk(|d| {
                let cache = d.modes().cache();
                let whole = cache.to_dot();
                if whole.len() <= TEXT_MAX {
                    return whole;
                }
                let mut blocks = 64;
                loop {
                    let summary = cache.to_dot_by_block(blocks);
                    if summary.len() <= TEXT_MAX || blocks == 0 {
                        return summary;
                    }
                    blocks /= 2;
                }
            })
            .map_err(super::Failure::from)?;
        Ok(Text::of(&dot).ok_or(Errno::EOVERFLOW)?.to_bytes())
    }

    fn figures(&self) -> OpResult<Value> {
        Ok(self.figure_source().figures()?)
    }
}

/// What the figures are read from: shared with the server.
pub struct Source {
    pub(super) fs: stitch_memfs::MemFs,
    pub(super) callers: std::sync::Arc<super::callers::Callers>,
    pub(super) streams: std::sync::Arc<super::streams::Streams>,
    pub(super) requests: std::sync::Arc<super::requests::Requests>,
    pub(super) xsync: std::sync::Arc<super::xsync::Groups>,
}

impl Source {
    /// The mount's figures now.
    pub fn figures(&self) -> Result<Value, stitch_memfs::MemError> {
        let (patches, journal) = self.fs.with_disk(|d| {
            let p = d.modes().cache().stats();
            let j = d.modes().journal().map(|j| (j.stats(), j.space()));
            (p, j)
        })?;
        let m = self.fs.stats();
        let mem = self.fs.memory();
        let o = m.own_flushes;
        let requests: Map<String, Value> = self
            .requests
            .summary()
            .into_iter()
            .map(|(name, r)| {
                (
                    name.to_string(),
                    json!({
                        "count": r.count,
                        "errors": r.errors,
                        "total_us": r.total_ns / 1000,
                        "p50_us": r.p50_ns / 1000,
                        "p99_us": r.p99_ns / 1000,
                        "max_us": r.max_ns / 1000,
                    }),
                )
            })
            .collect();
        let fsync = requests.get("fsync").cloned().unwrap_or_else(|| {
            json!({"count": 0, "errors": 0, "total_us": 0, "p50_us": 0, "p99_us": 0, "max_us": 0})
        });
        let kinds = |counts: &[u64; 7]| -> Map<String, Value> {
            stitch_memfs::OpKinds::NAMES
                .iter()
                .zip(counts)
                .map(|(k, n)| (k.to_string(), json!(n)))
                .collect()
        };
        let block = self.fs.block_size();
        let pending = self.fs.pending();
        let groups = self.fs.group_table().list();
        let (xs, xs_live, held_bytes, held_chunks, marked) = self.xsync.figures();
        let mut by_stream: Vec<Value> = self
            .streams
            .names()
            .into_iter()
            .map(|(id, name)| {
                json!({
                    "name": String::from_utf8_lossy(&name),
                    "id": id,
                    "pending_changes": pending.by_domain.get(&id).copied().unwrap_or(0),
                })
            })
            .collect();
        if self.fs.order() == stitch_memfs::Order::Global {
            let id = stitch_memfs::GLOBAL;
            by_stream.insert(
                0,
                json!({
                    "name": "(global)",
                    "id": id,
                    "pending_changes": pending.by_domain.get(&id).copied().unwrap_or(0),
                }),
            );
        }
        Ok(json!({
            "api": stitch_control::API_VERSION,
            // The serving process, which `stitchfs umount` waits for when
            // the mount's source is not a file it can lock (an NBD URI).
            "server_pid": std::process::id(),
            "order": self.fs.order().to_string(),
            "patches": {
                "requests": patches.requests,
                "created": patches.patches_created(),
                "created_byte": patches.created_byte,
                "created_bit": patches.created_bit,
                "created_empty": patches.created_empty,
                "created_hard": patches.created_hard,
                "merged": patches.merged(),
                "merged_hard": patches.merged_hard,
                "merged_soft_to_hard": patches.merged_soft_to_hard,
                "merged_overlap": patches.merged_overlap,
                "overlap_merge_refused": patches.overlap_merge_refused,
                "undo_bytes_allocated": patches.undo_bytes_allocated,
                "undo_bytes_live": patches.undo_bytes_live,
                "rollbacks": patches.reverts,
                "commits": patches.commits,
                "blocks_written": patches.blocks_written,
                "write_batches": patches.write_batches,
                "device_flushes": patches.flushes,
                "blocks_read": patches.blocks_read,
                "evictions": patches.evictions,
                "backpressure_waits": patches.backpressure_waits,
                "live_patches": patches.live_patches,
                "dirty_blocks": patches.dirty_blocks,
                "cached_blocks": patches.cached_blocks,
            },
            "journal": journal.map(|(j, (used, capacity))| json!({
                "log_used_blocks": used,
                "log_capacity_blocks": capacity,
                "commits": j.commits,
                "data_only": j.data_only,
                "log_blocks": j.log_blocks,
                "copies": j.copies,
                "revokes": j.revokes,
                "tail_moves": j.tail_moves,
                "space_waits": j.space_waits,
            })),
            "memfs": {
                "flushes": m.flushes,
                "ops_applied": m.ops_applied,
                "ops_absorbed": m.ops_absorbed,
                "pages_written": m.pages_written,
                "fsync_noops": m.fsync_noops,
                "fsyncs_ignored": m.fsyncs_ignored,
                "pages_evicted": m.pages_evicted,
                "write_behinds": m.write_behinds,
                "written_behind": m.written_behind,
                "pages_reused": m.pages_reused,
                "applied": kinds(&m.op_kinds.applied),
                "absorbed": kinds(&m.op_kinds.absorbed),
                "own_flushes": {
                    "periodic": o.periodic,
                    "write_behind": o.write_behind,
                    "pressure": o.pressure,
                    "room": o.room,
                    "settle": o.settle,
                },
                "pages": mem.pages,
                "dirty_pages": mem.dirty_pages,
                "dirty_bytes": mem.dirty_pages * block,
                "dirty_inodes": mem.dirty_inodes,
                "inodes": mem.inodes,
            },
            "requests": requests,
            "fsync": fsync,
            "domains": {
                "streams": self.streams.len(),
                "contexts": self.callers.len(),
                "pending_changes": pending.changes,
                "by_stream": by_stream,
                "patchgroups": groups.len(),
                "patchgroups_made": self.fs.group_table().made(),
                "patchgroups_engaged": groups.iter().filter(|g| g.engaged > 0).count(),
                "patchgroups_sealed": groups.iter().filter(|g| g.sealed).count(),
                "patchgroup_pending_changes": pending
                    .by_domain
                    .range(stitch_memfs::GROUP_DOMAIN..stitch_memfs::GLOBAL)
                    .map(|(_, n)| n)
                    .sum::<u64>(),
            },
            "xsync": {
                "groups": xs_live,
                "groups_made": xs.groups_made,
                "commits": xs.commits,
                "commits_flushed": xs.commits_flushed,
                "syncs_returned": xs.syncs_returned,
                "observers_held": xs.observers_held,
                "observer_wait_us": xs.observer_wait_us,
                "held_bytes": held_bytes,
                "held_chunks": held_chunks,
                "max_held_bytes": xs.max_held_bytes,
                "durable_below": self.fs.durable_below(),
                "stamp": self.fs.stamp_now(),
                "inodes_marked": marked,
            },
        }))
    }
}
