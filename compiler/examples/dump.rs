fn main() {
    let path = std::env::args().nth(1).unwrap();
    let src = std::fs::read_to_string(&path).unwrap();
    match hopfuse::compile(&src, &Default::default()) {
        Ok(c) => {
            for p in &c.passes {
                println!("// ---- {}\n{}", p.name, p.ir);
            }
            println!("{}", c.cuda);
            println!("{}", serde_json::to_string(&c.plan.constraints).unwrap());
        }
        Err(e) => println!("{}", e.render(&src, &path)),
    }
}
