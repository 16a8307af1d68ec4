//! `wasm-bindgen`: the upstream CLI's entry point (`wasm-bindgen-cli`'s own `main`), built here
//! from this crate's committed Cargo.lock so every install gets the same dependency versions.
use std::{env, process};

fn main() {
    if let Err(e) = wasm_bindgen_cli::wasm_bindgen::run_cli_with_args(env::args_os()) {
        eprintln!("error: {e:?}");
        process::exit(1);
    }
}
