//! What the pane says about the consumer groups' turns and about what runs while a product is
//! in flight, from the view's `Mma::turns`, `Mma::turn` and `Mma::in_flight`.
//!
//! Attention (a role with two products, the second's A operand in registers: P from the
//! softmax of the first's accumulator) names its products S_j and P V, the P V product
//! `P_{j-1} V_{j-1}` when tile j's softmax runs while it is in flight (the P it multiplies
//! cannot be tile j's, which that softmax is still computing), else `P_j V_j`.

use hopfuse::backend::pipeline_view::{Mma, PipelineView, TurnKind};

/// The products of an attention kernel's role: (S, P V), as indices into `v.mmas`.
fn attention(v: &PipelineView, role: usize) -> Option<(usize, usize)> {
    let mine: Vec<usize> = (0..v.mmas.len())
        .filter(|&j| v.mmas[j].role == role)
        .collect();
    let [a, b] = mine[..] else { return None };
    let in_registers = |m: &Mma| m.a.tensor.is_none() && m.a.pipeline.is_none();
    match (in_registers(&v.mmas[a]), in_registers(&v.mmas[b])) {
        (false, true) => Some((a, b)),
        (true, false) => Some((b, a)),
        _ => None,
    }
}

/// A product's name: S_j, P_{j-1} V_{j-1} or P_j V_j in an attention kernel, else the product
/// into its accumulator.
fn name(v: &PipelineView, j: usize) -> String {
    let m = &v.mmas[j];
    match attention(v, m.role) {
        Some((s, _)) if s == j => "S_j".into(),
        Some((s, _)) if m.in_flight.epilogues.contains(&s) => "P_{j-1} V_{j-1}".into(),
        Some(_) => "P_j V_j".into(),
        None => format!("the product into {}", m.accumulator.buffer),
    }
}

/// The global tensors the products of `m`'s role read their B operand from (`k and v`).
fn stage_tensors(v: &PipelineView, m: &Mma) -> String {
    let mut tensors: Vec<&str> = Vec::new();
    for o in v.mmas.iter().filter(|o| o.role == m.role) {
        if let Some(t) = o.b.tensor.as_deref().filter(|t| !tensors.contains(t)) {
            tensors.push(t);
        }
    }
    tensors.join(" and ")
}

/// How the groups take turns, when they do: the matmul ping-pong's whole stages, or the
/// products on shared stages (who issues what in which turn).
pub(super) fn turns_text(v: &PipelineView, m: &Mma) -> Option<String> {
    let t = m.turns?;
    let n = t.groups;
    Some(match t.kind {
        TurnKind::Stages => format!(
            "ping-pong: the {n} groups take turns, each with whole stages of its own tile, one's epilogue under the next one's wgmmas"
        ),
        TurnKind::Products => {
            let mine: Vec<usize> = (0..v.mmas.len())
                .filter(|&j| v.mmas[j].role == m.role)
                .collect();
            let names: Vec<String> = mine.iter().map(|&j| name(v, j)).collect();
            let turns: Vec<Option<usize>> = mine.iter().map(|&j| v.mmas[j].turn).collect();
            let how = if turns.iter().all(|t| t.is_some() && *t == turns[0]) {
                if names.len() > 1 {
                    ", all in one turn"
                } else {
                    ""
                }
            } else {
                ", each in a turn of its own"
            };
            format!(
                "turns=products: the {n} consumer groups share every stage of {} and take turns issuing {}{how} (named barriers pass the turn)",
                stage_tensors(v, m),
                names.join(" and ")
            )
        }
    })
}

/// What runs while `m` is in flight (the wait that drains it, the products issued and the
/// accumulators read meanwhile); None for a role with one product (its stages say it).
pub(super) fn in_flight_text(v: &PipelineView, m: &Mma) -> Option<String> {
    // (`m` is one of the view's products: the table and the diagram pass them.)
    let j = v.mmas.iter().position(|o| std::ptr::eq(o, m))?;
    if v.mmas.iter().filter(|o| o.role == m.role).count() < 2 {
        return None;
    }
    let f = &m.in_flight;
    let me = name(v, j);
    let Some(n) = f.drained_by else {
        return Some(format!("no wait_group in its loop drains {me}"));
    };
    let attention = attention(v, m.role);
    let next = if f.next_iteration {
        format!(
            " in the next {} iteration",
            m.loop_var.as_deref().unwrap_or("loop")
        )
    } else {
        String::new()
    };
    let drained = format!("wait_group {n}{next} drains it");
    if f.products.is_empty() && f.epilogues.is_empty() {
        let waits = match attention {
            Some((s, _)) if s == j => "the softmax waits for it".to_string(),
            _ => format!("what reads {} waits for it", m.accumulator.buffer),
        };
        return Some(format!(
            "nothing runs while {me} is in flight: {drained} right after its commit, so {waits}"
        ));
    }
    let mut parts = Vec::new();
    for &e in &f.epilogues {
        let work = match attention {
            Some((s, _)) if s == e => {
                format!(
                    "each group's softmax of tile j (on {})",
                    v.mmas[e].accumulator.buffer
                )
            }
            _ => format!("the epilogue of {}", v.mmas[e].accumulator.buffer),
        };
        let others = if m.turns.is_some_and(|t| t.kind == TurnKind::Products) {
            " and the other group's products are"
        } else {
            " is"
        };
        parts.push(format!("{work} runs while its {me}{others} in flight"));
    }
    let issued: Vec<String> = f
        .products
        .iter()
        .map(|&p| match attention {
            _ if p == j => format!("its next {me}"),
            // Issued after the back edge: the next tile's S.
            Some((s, _)) if s == p && f.next_iteration => "S_{j+1}".into(),
            _ => name(v, p),
        })
        .collect();
    if !issued.is_empty() {
        parts.push(format!(
            "{me} is in flight while the group issues {}",
            issued.join(" and ")
        ));
    }
    Some(format!("{}; {drained}", parts.join("; ")))
}
