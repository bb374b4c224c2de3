//! The on-disk chunk file header (see docs/chunk-format.md).
