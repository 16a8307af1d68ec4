//! Writes every stress program to a directory: `cargo run -p hopfuse-tests --example stress_dump DIR`.
fn main() {
    let dir = std::env::args().nth(1).expect("usage: stress_dump DIR");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, src) in hopfuse_tests::stress::all() {
        std::fs::write(format!("{dir}/{}.hf", name.replace(' ', "_")), src).unwrap();
    }
}
