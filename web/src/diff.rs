//! A line diff (longest common subsequence) between two pass dumps.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Same,
    Added,
    Removed,
}

/// Lines of `new` and `old` in order, each marked. The common prefix and suffix are trimmed
/// first; a middle too large for the quadratic table is shown as removed then added.
pub fn lines<'a>(old: &'a str, new: &'a str) -> Vec<(Op, &'a str)> {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut out: Vec<(Op, &str)> = a[..prefix].iter().map(|l| (Op::Same, *l)).collect();
    if ma.len() * mb.len() > 4_000_000 {
        out.extend(ma.iter().map(|l| (Op::Removed, *l)));
        out.extend(mb.iter().map(|l| (Op::Added, *l)));
    } else {
        // lcs[i][j]: LCS length of ma[i..] and mb[j..].
        let w = mb.len() + 1;
        let mut lcs = vec![0u32; (ma.len() + 1) * w];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                out.push((Op::Same, ma[i]));
                i += 1;
                j += 1;
            } else if i < ma.len() && (j == mb.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])
            {
                out.push((Op::Removed, ma[i]));
                i += 1;
            } else {
                out.push((Op::Added, mb[j]));
                j += 1;
            }
        }
    }
    out.extend(a[a.len() - suffix..].iter().map(|l| (Op::Same, *l)));
    out
}

/// A row of a diff as shown: a line, or a run of unchanged lines left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Row<'a> {
    Line(Op, &'a str),
    Skipped(usize),
}

/// Keeps `context` unchanged lines around each change and folds longer unchanged runs.
pub fn hunks<'a>(lines: &[(Op, &'a str)], context: usize) -> Vec<Row<'a>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].0 != Op::Same {
            out.push(Row::Line(lines[i].0, lines[i].1));
            i += 1;
            continue;
        }
        let end = lines[i..]
            .iter()
            .position(|(o, _)| *o != Op::Same)
            .map_or(lines.len(), |p| i + p);
        let keep_head = if i == 0 { 0 } else { context };
        let keep_tail = if end == lines.len() { 0 } else { context };
        if end - i > keep_head + keep_tail + 1 {
            out.extend(
                lines[i..i + keep_head]
                    .iter()
                    .map(|(o, l)| Row::Line(*o, l)),
            );
            out.push(Row::Skipped(end - i - keep_head - keep_tail));
            out.extend(
                lines[end - keep_tail..end]
                    .iter()
                    .map(|(o, l)| Row::Line(*o, l)),
            );
        } else {
            out.extend(lines[i..end].iter().map(|(o, l)| Row::Line(*o, l)));
        }
        i = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_unchanged_runs() {
        let old: String = (0..20).map(|i| format!("l{i}\n")).collect();
        let new = old.replace("l10\n", "changed\n");
        let rows = hunks(&lines(&old, &new), 2);
        assert_eq!(rows[0], Row::Skipped(8));
        assert_eq!(rows[1], Row::Line(Op::Same, "l8"));
        assert_eq!(rows[3], Row::Line(Op::Removed, "l10"));
        assert_eq!(rows[4], Row::Line(Op::Added, "changed"));
        assert_eq!(rows[7], Row::Skipped(7));
        assert_eq!(rows.len(), 8);
        // A short unchanged run between two changes is kept whole.
        let near = old.replace("l3\n", "x\n").replace("l6\n", "y\n");
        let rows = hunks(&lines(&old, &near), 2);
        assert!(
            rows.contains(&Row::Line(Op::Same, "l4")) && rows.contains(&Row::Line(Op::Same, "l5"))
        );
    }

    #[test]
    fn marks_added_and_removed_lines() {
        let d = lines("a\nb\nc\nd", "a\nx\nc\nd\ne");
        let ops: Vec<_> = d.iter().map(|(o, l)| (*o, *l)).collect();
        assert_eq!(
            ops,
            vec![
                (Op::Same, "a"),
                (Op::Removed, "b"),
                (Op::Added, "x"),
                (Op::Same, "c"),
                (Op::Same, "d"),
                (Op::Added, "e"),
            ]
        );
        assert!(lines("same\n", "same\n")
            .iter()
            .all(|(o, _)| *o == Op::Same));
    }
}
