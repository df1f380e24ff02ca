//! The live dependency graph as Graphviz DOT (Featherstitch's debugger,
//! §4.5): one cluster per block, hard patches bold, in-flight ones dashed,
//! empty patches as small circles, arrows from a patch to what it depends on.
//! For a graph too large to read, a summary by block: one node per block
//! (its patches counted), one arrow per pair of blocks with a dependency
//! between them (the dependencies counted).

use crate::patch::{Kind, State, NO_BLOCK};
use crate::PatchCache;
use std::collections::BTreeMap;
use std::fmt::Write;

impl PatchCache {
    /// Renders every live patch and direct dependency.
    pub fn to_dot(&self) -> String {
        let mut by_block: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        let mut empties = Vec::new();
        let mut edges = String::new();
        for id in self.arena.live_ids() {
            let p = self.arena.get(id);
            let label = match p.kind {
                Kind::Byte { offset, len } => format!("{id}\\n[{offset}, {})", offset + len),
                Kind::Bit { offset, mask } => format!("{id}\\nbits {mask:#x}@{offset}"),
                Kind::Empty => format!("{id}{}", if p.held { " held" } else { "" }),
            };
            let mut style = vec![];
            if p.hard {
                style.push("bold");
            }
            if p.state == State::InFlight {
                style.push("dashed");
            }
            let node = format!(
                "  \"{id}\" [label=\"{label}\" style=\"{}\"];",
                style.join(",")
            );
            if p.block == NO_BLOCK {
                empties.push(node.replace("[label", "[shape=circle label"));
            } else {
                by_block
                    .entry(self.blocks.get(p.block).no.0)
                    .or_default()
                    .push(node);
            }
            for d in &p.ddeps {
                let _ = writeln!(edges, "  \"{id}\" -> \"{d}\";");
            }
        }
        let mut out = String::from("digraph patches {\n  node [shape=box];\n");
        for (block, nodes) in by_block {
            let _ = writeln!(
                out,
                "  subgraph cluster_{block} {{\n  label=\"block {block}\";"
            );
            for n in nodes {
                let _ = writeln!(out, "  {n}");
            }
            out.push_str("  }\n");
        }
        for n in empties {
            let _ = writeln!(out, "{n}");
        }
        out.push_str(&edges);
        out.push_str("}\n");
        out
    }

    /// The summary by block: the `max_blocks` blocks with the most live
    /// patches each a node, the rest as one ("other blocks"), empty
    /// patches as one ("empty patches").
    pub fn to_dot_by_block(&self, max_blocks: usize) -> String {
        const EMPTY: u64 = u64::MAX;
        const OTHER: u64 = u64::MAX - 1;
        let group = |id| {
            let p = self.arena.get(id);
            if p.block == NO_BLOCK {
                EMPTY
            } else {
                self.blocks.get(p.block).no.0
            }
        };
        let mut patches: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        for id in self.arena.live_ids() {
            let e = patches.entry(group(id)).or_default();
            e.0 += 1;
            e.1 += usize::from(self.arena.get(id).hard);
        }
        let mut ranked: Vec<(u64, usize)> = patches
            .iter()
            .filter(|(&b, _)| b != EMPTY)
            .map(|(&b, &(n, _))| (b, n))
            .collect();
        ranked.sort_by_key(|&(b, n)| (std::cmp::Reverse(n), b));
        let shown: std::collections::BTreeSet<u64> =
            ranked.iter().take(max_blocks).map(|&(b, _)| b).collect();
        let place = |b: u64| {
            if b == EMPTY || shown.contains(&b) {
                b
            } else {
                OTHER
            }
        };
        let mut nodes: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
        for (&b, &(n, hard)) in &patches {
            let e = nodes.entry(place(b)).or_default();
            e.0 += n;
            e.1 += hard;
        }
        let mut edges: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for id in self.arena.live_ids() {
            let from = place(group(id));
            for &d in &self.arena.get(id).ddeps {
                *edges.entry((from, place(group(d)))).or_default() += 1;
            }
        }
        let name = |b: u64| match b {
            EMPTY => "empty".to_string(),
            OTHER => "other".to_string(),
            b => format!("b{b}"),
        };
        let mut out = String::from("digraph blocks {\n  node [shape=box];\n");
        for (&b, &(n, hard)) in &nodes {
            let what = match b {
                EMPTY => "empty patches".to_string(),
                OTHER => format!(
                    "{} other blocks",
                    patches.len() - shown.len() - usize::from(patches.contains_key(&EMPTY))
                ),
                b => format!("block {b}"),
            };
            let _ = writeln!(
                out,
                "  \"{}\" [label=\"{what}\\n{n} patches, {hard} hard\"];",
                name(b)
            );
        }
        for ((a, b), n) in edges {
            let _ = writeln!(out, "  \"{}\" -> \"{}\" [label=\"{n}\"];", name(a), name(b));
        }
        out.push_str("}\n");
        out
    }
}
