//! The editor's Format action: a program's layout made regular without touching what it says.
//! Takes the program text (valid or not) and returns it with every line indented two spaces
//! per open brace, runs of spaces inside code made one, a space after each comma and none just
//! inside brackets, trailing spaces and repeated blank lines removed, and one final newline.
//! Comments are kept as written, with the gap before a trailing comment; only whitespace
//! changes, so the program parses to the same tree.

/// The program text laid out regularly (see the module doc).
pub fn format_program(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut depth = 0usize;
    let mut blank = false;
    for line in text.lines() {
        let (code, gap, comment) = split_comment(line);
        let code = tidy(code);
        if code.is_empty() && comment.is_empty() {
            blank = !out.is_empty();
            continue;
        }
        if blank {
            out.push('\n');
            blank = false;
        }
        // A line that starts by closing a block sits at the block's own level.
        let closing = code.chars().take_while(|&c| c == '}').count();
        let level = depth.saturating_sub(closing);
        out.extend(std::iter::repeat_n("  ", level));
        out.push_str(&code);
        if !comment.is_empty() {
            if !code.is_empty() {
                out.push_str(if gap.is_empty() { " " } else { gap });
            }
            out.push_str(comment);
        }
        out.push('\n');
        let opened = code.matches('{').count();
        depth = (depth + opened).saturating_sub(code.matches('}').count());
    }
    out
}

/// A line's code, the whitespace before its `//` comment, and the comment (the language has no
/// strings, so the first `//` starts it).
fn split_comment(line: &str) -> (&str, &str, &str) {
    match line.find("//") {
        Some(i) => {
            let code = line[..i].trim_end();
            (code, &line[code.len()..i], &line[i..])
        }
        None => (line, "", ""),
    }
}

/// Code with single spaces, `, ` after commas and nothing just inside `(`, `[` or before `)`,
/// `]`, `,`.
fn tidy(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut space = false;
    for c in code.trim().chars() {
        if c.is_whitespace() {
            space = true;
            continue;
        }
        let after_open = out.ends_with(['(', '[']);
        if (space || out.ends_with(',')) && !after_open && !matches!(c, ')' | ']' | ',') {
            out.push(' ');
        }
        space = false;
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSY: &str = "// sums\n\n\nfusion f {\ninput   x: f32[ M,N ]   // the input\n      y = exp( x )*2\n  output y\n    }\nschedule {\n y.split(0,128)\n\n\n\ty.parallelize( 1 , TIDx)\n}";

    #[test]
    fn lays_out_a_messy_program() {
        assert_eq!(
            format_program(MESSY),
            "// sums\n\nfusion f {\n  input x: f32[M, N]   // the input\n  y = exp(x)*2\n  output y\n}\nschedule {\n  y.split(0, 128)\n\n  y.parallelize(1, TIDx)\n}\n"
        );
    }

    #[test]
    fn is_idempotent_and_changes_no_program() {
        let once = format_program(MESSY);
        assert_eq!(format_program(&once), once);
        for e in crate::examples::ALL {
            let src = crate::examples::source(e);
            let formatted = format_program(src);
            assert_eq!(format_program(&formatted), formatted, "{}", e.name);
            let parse = |t: &str| hopfuse::frontend::print(&hopfuse::frontend::parse(t).unwrap());
            assert_eq!(parse(src), parse(&formatted), "{}", e.name);
        }
    }
}
