//! The on-disk format (placeholder).
