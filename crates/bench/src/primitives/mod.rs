//! `inec bench primitives`: the paper's encode/decode suite on a running cluster.
