//! `v, m = var_mean(x, axis=1, correction=..)`: the tuple assignment (parsed, printed back,
//! located errors for a wrong number of names, repeated or taken names, a call that gives one
//! tensor), the float64 reference equal to `var` and `mean`, one sum for both in the kernel,
//! and the twin.

use hopfuse_tests::{compile, error};
use std::collections::BTreeMap;

fn program(body: &str) -> String {
    format!("fusion f {{\n  input x: f32[M, N]\n  {body}\n  output v\n  output m\n}}\n")
}

fn evaluate(src: &str, rows: &[Vec<f64>]) -> BTreeMap<String, Vec<f64>> {
    let f = hopfuse::reference_fusion(src).unwrap_or_else(|e| panic!("{}", e.render(src, "t.hf")));
    let sizes = BTreeMap::from([
        ("M".to_string(), rows.len() as i64),
        ("N".to_string(), rows[0].len() as i64),
    ]);
    hopfuse::backend::reference::evaluate(
        &f,
        &sizes,
        &BTreeMap::from([("x".to_string(), rows.concat())]),
    )
    .unwrap()
}

#[test]
fn var_mean_is_var_and_mean_in_the_reference() {
    let rows = vec![vec![1.0, 2.0, 4.0, 7.0], vec![-3.0, 0.5, 0.5, 10.0]];
    for correction in ["", ", correction=0", ", correction=2"] {
        let tuple = evaluate(
            &program(&format!("v, m = var_mean(x, axis=1{correction})")),
            &rows,
        );
        let apart = evaluate(
            &program(&format!(
                "v = var(x, axis=1{correction})\n  m = mean(x, axis=1)"
            )),
            &rows,
        );
        assert_eq!(tuple, apart, "{correction}");
    }
    // Known values: row 0 has mean 3.5 and squared deviations 6.25 + 2.25 + 0.25 + 12.25 = 21.
    let out = evaluate(&program("v, m = var_mean(x, axis=1)"), &rows);
    assert_eq!(out["m"][0], 3.5);
    assert_eq!(out["v"][0], 21.0 / 3.0);
}

#[test]
fn the_tuple_prints_back_and_the_kernel_sums_once() {
    let src = program("v, m = var_mean(x, axis=1, correction=0)");
    let p = hopfuse::frontend::parse(&src).unwrap();
    let printed = hopfuse::frontend::print(&p);
    assert!(
        printed.contains("  v, m = var_mean(x, axis=1, correction=0)\n"),
        "{printed}"
    );
    assert_eq!(hopfuse::frontend::parse(&printed).unwrap(), p);
    let c = compile(&src);
    let sums = c.fusion.exprs.iter().filter(|e| {
        matches!(
            e.op,
            hopfuse::fusion::Op::Reduce {
                op: hopfuse::fusion::ReduceOp::Sum,
                ..
            }
        )
    });
    // One sum of x for the mean, one of the squared deviations.
    assert_eq!(sums.count(), 2);
    let twin = hopfuse::torch_twin(&src).unwrap().source;
    assert!(
        twin.contains("    v, m = torch.var_mean(x, dim=1, correction=0)\n")
            && !twin.contains("torch.mean"),
        "{twin}"
    );
    // `var` and `mean` written apart stay torch.var and torch.mean (var sums x itself).
    let apart = program("v = var(x, axis=1)\n  m = mean(x, axis=1)");
    let twin = hopfuse::torch_twin(&apart).unwrap().source;
    assert!(
        twin.contains("v = torch.var(x, dim=1, correction=1)")
            && twin.contains("m = torch.mean(x, dim=1)")
            && !twin.contains("var_mean"),
        "{twin}"
    );
}

#[test]
fn tuple_errors_are_located() {
    let e = error(&program("v, m, s = var_mean(x, axis=1)"));
    assert!(
        e.contains("t.hf:3:3") && e.contains("`var_mean` gives 2 tensors (the variance, then the mean), and 3 names are assigned"),
        "{e}"
    );
    let e = error(&program("v, m = sum(x, axis=1)"));
    assert!(
        e.contains("t.hf:3:10") && e.contains("only `var_mean` gives several"),
        "{e}"
    );
    let e = error(&program("v, v = var_mean(x, axis=1)"));
    assert!(
        e.contains("t.hf:3:6") && e.contains("`v` is assigned twice"),
        "{e}"
    );
    let e = error(&program("v, x = var_mean(x, axis=1)"));
    assert!(
        e.contains("t.hf:3:6") && e.contains("`x` is already defined"),
        "{e}"
    );
    let e = error(&program("v = var_mean(x, axis=1)\n  m = v"));
    assert!(
        e.contains("t.hf:3:7")
            && e.contains("`var_mean` gives two tensors, the variance and the mean: assign both"),
        "{e}"
    );
    let e = error(&program("v, m = var_mean(x, axis=1, ddof=1)"));
    assert!(
        e.contains("`var_mean` takes `axis=`, `axes=`, `correction=`, not `ddof=`"),
        "{e}"
    );
    let e = error(&program("v, = var_mean(x, axis=1)"));
    assert!(
        e.contains("t.hf:3:6") && e.contains("a name to assign"),
        "{e}"
    );
}
