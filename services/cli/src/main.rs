//! `flow`: the Flow command-line tool.
fn main() {}
