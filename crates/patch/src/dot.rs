//! The live dependency graph as Graphviz DOT (Featherstitch's debugger,
//! §4.5): one cluster per block, hard patches bold, in-flight ones dashed,
//! empty patches as small circles, arrows from a patch to what it depends on.

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
}
