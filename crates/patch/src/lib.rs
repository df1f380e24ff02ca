//! Patches (placeholder).
