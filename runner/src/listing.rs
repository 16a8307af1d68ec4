//! Reading what NVRTC and nvdisasm print, for `crate::inspect`: NVRTC's PTX with its `.loc`
//! directives and nvdisasm's SASS with its `//##` line comments become [`Listing`]s whose lines
//! know the CUDA line they came from (code inlined from a prelude helper counted at the kernel
//! line that called it), ptxas's `-v` report becomes [`Resources`], and a warning names its
//! CUDA line. Pure text processing, no tools run here; split from `inspect.rs` without change.

use hopfuse_api::inspect::{Listing, Resources};

/// Whether an instruction line of a listing (not a directive, label, brace or comment).
pub(crate) fn is_instruction(line: &str) -> bool {
    let t = line.trim();
    !(t.is_empty()
        || t.starts_with('.')
        || t.starts_with("//")
        || t.starts_with('{')
        || t.starts_with('}')
        || t.starts_with(')')
        || t.ends_with(':'))
}

/// PTX without its `.loc` lines, each instruction at the CUDA line of the `.loc` before it.
/// A `.loc` inside inlined code (`, inlined_at F L C`) counts at its call site; when that call
/// site is itself in a helper (nested inlining), at the last kernel-level `.loc`.
pub fn parse_ptx(ptx: &str, name: &str, in_kernel: &dyn Fn(u32) -> bool) -> Listing {
    // `.file N "path"` (NVRTC puts them at the end): the index of our source.
    let file = ptx
        .lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix(".file")?.trim();
            let (idx, path) = rest.split_once(char::is_whitespace)?;
            let path = path.trim().split('"').nth(1)?;
            (path == name || path.ends_with(&format!("/{name}"))).then(|| idx.trim().to_string())
        })
        .next();
    let mut out = Listing::default();
    let (mut current, mut inlined, mut top): (Option<u32>, Option<u32>, Option<u32>) =
        (None, None, None);
    let mut line_zero = false;
    for line in ptx.lines() {
        if let Some(rest) = line.trim().strip_prefix(".loc") {
            line_zero = rest
                .split(|c: char| c.is_whitespace() || c == ',')
                .filter(|w| !w.is_empty())
                .nth(1)
                == Some("0");
            let (loc, inline_site) = match rest.split_once(", inlined_at") {
                Some((loc, site)) => (loc, Some(site)),
                None => (rest, None),
            };
            let ours = |text: &str| -> Option<u32> {
                let mut w = text.split(|c: char| c.is_whitespace() || c == ',');
                let mut w = w.by_ref().filter(|s| !s.is_empty());
                let f = w.next()?;
                // Line 0: code the compiler made up (no source line).
                let l = w.next()?.parse().ok().filter(|&l: &u32| l > 0)?;
                (Some(f) == file.as_deref()).then_some(l)
            };
            let here = ours(loc);
            match inline_site {
                None => {
                    current = here;
                    inlined = None;
                    // A `.loc 1 0` (no line) between two pieces of one inlined helper does not
                    // end the kernel-level position: code nested further in that helper after
                    // it (a `__syncthreads` inside `hf_block_reduce`) still counts there.
                    if here.is_some() {
                        top = here;
                    }
                }
                Some(site) => {
                    // A call site in the kernel is the last kernel-level position too: code
                    // inlined further down (a combine inside `hf_block_reduce`) counts there,
                    // even after a `.loc 1 0` (no line) reset `top`.
                    let site = ours(site).filter(|&l| in_kernel(l));
                    if site.is_some() {
                        top = site;
                    }
                    let call = site.or(top);
                    current = call;
                    inlined = here.filter(|&h| Some(h) != call);
                }
            }
            continue;
        }
        let code = is_instruction(line);
        // Line 0 inside an inlined helper still has the call site's line (`current`): only an
        // instruction with no line at all is one of NVRTC's made-up ones.
        if code && line_zero && current.is_none() {
            out.no_source_line += 1;
        }
        out.text.push_str(line);
        out.text.push('\n');
        out.cuda_lines.push(if code { current } else { None });
        out.inlined.push(if code { inlined } else { None });
    }
    out
}

/// One `//## File "x.cu", line 3 inlined at "x.cu", line 8 ...` comment: the chain of
/// (file, line), innermost first.
fn sass_chain(comment: &str) -> Vec<(String, u32)> {
    let mut chain = Vec::new();
    let mut rest = comment;
    while let Some(i) = rest.find("File \"").or_else(|| rest.find("at \"")) {
        let after = &rest[i..];
        let Some(q) = after.find('"') else { break };
        let after = &after[q + 1..];
        let Some(end) = after.find('"') else { break };
        let file = after[..end].to_string();
        let after = &after[end + 1..];
        let Some(l) = after.find("line ") else { break };
        let digits: String = after[l + 5..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        let Ok(line) = digits.parse::<u32>() else {
            break;
        };
        if line > 0 {
            chain.push((file, line));
        }
        rest = &after[l + 5 + digits.len()..];
    }
    chain
}

/// nvdisasm's listing without its `//##` comments, each instruction at the kernel line of the
/// comment before it (the outermost location of an inlining chain in the kernel). nvdisasm
/// gives one level of inlining: code of a helper inlined into a helper (the reduction operator
/// inside `hf_block_reduce`) names no kernel line, and counts at the last kernel line before it.
pub fn parse_sass(sass: &str, name: &str, in_kernel: &dyn Fn(u32) -> bool) -> Listing {
    let ours = |f: &str| f == name || f.ends_with(&format!("/{name}"));
    let mut out = Listing::default();
    let (mut current, mut inlined, mut top) = (None, None, None);
    let mut in_comments = false;
    let mut helper_only = None;
    for line in sass.lines() {
        let t = line.trim();
        if t.starts_with("//##") {
            let chain: Vec<u32> = sass_chain(t)
                .into_iter()
                .filter(|(f, _)| ours(f))
                .map(|(_, l)| l)
                .collect();
            // A run of comments describes one place: the first chain that reaches the kernel
            // gives the line; its innermost entry is the helper's line.
            if !in_comments {
                current = None;
                inlined = None;
                helper_only = None;
            }
            in_comments = true;
            if current.is_none() {
                if let Some(&outer) = chain.iter().rev().find(|&&l| in_kernel(l)) {
                    current = Some(outer);
                    top = current;
                    inlined = chain.first().copied().filter(|&l| l != outer);
                } else if helper_only.is_none() {
                    helper_only = chain.first().copied();
                }
            }
            continue;
        }
        if in_comments && current.is_none() {
            current = top;
            inlined = helper_only;
        }
        in_comments = false;
        if out.text.is_empty() && t.is_empty() {
            continue;
        }
        // Instructions: `/*0040*/  LEA R7, R7, R0, 0x7 ;`
        let code = t.starts_with("/*") && t.contains("*/") && is_instruction(t);
        out.text.push_str(line);
        out.text.push('\n');
        out.cuda_lines.push(if code { current } else { None });
        out.inlined.push(if code { inlined } else { None });
    }
    unmap_padding(&mut out);
    out
}

/// Every function ends with `.L_x_N: BRA `(.L_x_N);` and `NOP`s up to its alignment: code that
/// never runs, which nvdisasm still files under the last line it named. It gets no CUDA line.
fn unmap_padding(l: &mut Listing) {
    let lines: Vec<&str> = l.text.lines().collect();
    let Some(bra) = lines.iter().rposition(|t| {
        let t = t.trim();
        t.starts_with("/*") && t.contains(" BRA `(") && t.ends_with(");")
    }) else {
        return;
    };
    let label = lines[..bra]
        .iter()
        .rev()
        .find(|t| t.trim().ends_with(':'))
        .map(|t| t.trim().trim_end_matches(':'));
    let to_itself = label.is_some_and(|lab| lines[bra].contains(&format!("`({lab});")));
    let only_nops_after = lines[bra + 1..].iter().all(|t| {
        let t = t.trim();
        !(t.starts_with("/*") && is_instruction(t)) || t.ends_with("NOP;")
    });
    if to_itself && only_nops_after {
        for i in bra..lines.len() {
            l.cuda_lines[i] = None;
            l.inlined[i] = None;
        }
    }
}

/// The numbers of ptxas's `-v` report.
pub fn parse_resources(log: &str) -> Resources {
    let mut r = Resources::default();
    let mut reported = false;
    for line in log.lines().filter(|l| l.starts_with("ptxas")) {
        // `ptxas info    : Used 14 registers, used 1 barriers, 8 bytes smem, 400 bytes cmem[0]`
        // `ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads`
        let body = line
            .split_once(" : ")
            .map(|x| x.1)
            .or_else(|| line.split_once(" . ").map(|x| x.1))
            .unwrap_or("");
        for part in body.split(',') {
            let words: Vec<&str> = part.split_whitespace().collect();
            let num = |i: usize| words.get(i).and_then(|w| w.parse::<u64>().ok());
            match words.as_slice() {
                ["Used", _, "registers"] => {
                    r.registers = num(1).map(|n| n as u32);
                    reported = true;
                }
                ["used", _, "barriers"] => r.barriers = num(1).map(|n| n as u32),
                [_, "bytes", "smem"] => r.shared_bytes = num(0),
                [_, "bytes", "lmem"] => r.local_bytes = num(0),
                [_, "bytes", "cmem[0]"] => r.constant_bytes = num(0),
                [_, "bytes", "stack", "frame"] => r.stack_bytes = num(0),
                [_, "bytes", "spill", "stores"] => r.spill_store_bytes = num(0),
                [_, "bytes", "spill", "loads"] => r.spill_load_bytes = num(0),
                _ => {}
            }
        }
    }
    // ptxas leaves out what the kernel does not use.
    if reported {
        r.barriers.get_or_insert(0);
        r.shared_bytes.get_or_insert(0);
        r.local_bytes.get_or_insert(0);
    }
    r
}

/// The CUDA line of a front-end warning (`kernel.cu(42): warning #177-D: ...`).
pub(crate) fn warning_line(text: &str, name: &str) -> Option<u32> {
    let rest = &text[text.find(&format!("{name}("))? + name.len() + 1..];
    rest[..rest.find(')')?].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptxas_resources_are_read_from_the_log() {
        let log = "ptxas info    : 0 bytes gmem\n\
                   ptxas info    : Compiling entry function 'k' for 'sm_90a'\n\
                   ptxas info    : Function properties for k\n\
                   ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n\
                   ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]\n\
                   ptxas info    : Compile time = 15.705 ms";
        let r = parse_resources(log);
        assert_eq!(
            r,
            Resources {
                registers: Some(40),
                barriers: Some(1),
                shared_bytes: Some(2048),
                stack_bytes: Some(16),
                spill_store_bytes: Some(8),
                spill_load_bytes: Some(4),
                local_bytes: Some(0),
                constant_bytes: Some(400),
            }
        );
        assert_eq!(parse_resources(""), Resources::default());
    }

    #[test]
    fn ptx_lines_follow_their_loc_and_inlined_code_its_call_site() {
        let ptx = "\t.loc\t1 5 0\n\tld.param.u64 \t%rd1, [p0];\n$L__BB0_2:\n\t.loc\t1 8 5\n\
                   \tmul.wide.s32 \t%rd4, %r1, 4;\n\
                   \t.loc\t1 3 3, function_name $L__info_string0, inlined_at 1 8 5\n\
                   \tex2.approx.ftz.f32 \t%f16, %f14;\n\
                   \t.loc\t1 2 1, function_name $L__info_string1, inlined_at 1 3 3\n\
                   \tmov.f32 \t%f1, %f2;\n\
                   \t.loc\t1 0 0\n\tshl.b32 \t%r8, %r7, 7;\n\
                   \t.loc\t1 10 1\n\tret;\n}\n\t.file\t1 \"/tmp/k.cu\"\n";
        // Lines 1..=4 are a helper in the prelude; the kernel starts at line 5.
        let l = parse_ptx(ptx, "k.cu", &|line| line >= 5);
        assert!(!l.text.contains(".loc"));
        let lines: Vec<&str> = l.text.lines().collect();
        let at = |needle: &str| {
            let i = lines.iter().position(|x| x.contains(needle)).unwrap();
            (l.cuda_lines[i], l.inlined[i])
        };
        assert_eq!(at("ld.param"), (Some(5), None));
        assert_eq!(at("$L__BB0_2"), (None, None));
        assert_eq!(at("mul.wide"), (Some(8), None));
        assert_eq!(at("ex2.approx"), (Some(8), Some(3)));
        // Nested: its call site (line 3) is in the prelude, so the last kernel line (8).
        assert_eq!(at("mov.f32"), (Some(8), Some(2)));
        assert_eq!(at("shl.b32"), (None, None));
        assert_eq!(at("ret;"), (Some(10), None));
        assert_eq!((l.mapped(), l.no_source_line), (5, 1));
    }

    #[test]
    fn nested_inlined_code_after_a_line_zero_counts_at_the_kernels_call_site() {
        // (argmax_rows at i64: a block reduction inlined at kernel line 8 right after a
        // `.loc 1 0`, its combine inlined at prelude line 3.)
        let ptx = "	.loc	1 6 0
	ld.param.u64 	%rd1, [p0];
	.loc	1 0 3
                   	cvt.u32.u64 	%r1, %rd1;
                   	.loc	1 3 3, function_name $L__info_string0, inlined_at 1 8 5
                   	and.b32 	%r2, %r1, 31;
                   	.loc	1 2 1, function_name $L__info_string1, inlined_at 1 3 3
                   	setp.leu.f32 	%p1, %f1, %f2;
                   	.loc	1 10 1
	ret;
}
	.file	1 \"/tmp/k.cu\"
";
        let l = parse_ptx(ptx, "k.cu", &|line| line >= 5);
        let lines: Vec<&str> = l.text.lines().collect();
        let at = |needle: &str| {
            let i = lines.iter().position(|x| x.contains(needle)).unwrap();
            (l.cuda_lines[i], l.inlined[i])
        };
        assert_eq!(at("cvt.u32"), (None, None));
        assert_eq!(at("and.b32"), (Some(8), Some(3)));
        assert_eq!(at("setp.leu"), (Some(8), Some(2)));
        assert_eq!((l.mapped(), l.no_source_line), (4, 1));
    }

    #[test]
    fn a_line_zero_inside_an_inlined_helper_keeps_its_kernel_call_site() {
        // (col_sum's 4 x 64 block at i32: `hf_block_reduce` inlined at kernel line 8, a
        // `.loc 1 0` in the middle of it, then its barrier, inlined at prelude line 4.)
        let ptx = "	.loc	1 3 9, function_name $L__info_string0, inlined_at 1 8 7
	add.f32 	%f1, %f1, %f2;
	.loc	1 0 68
	ld.param.u64 	%rd1, [p1];
	.loc	1 2 3, function_name $L__info_string1, inlined_at 1 4 3
	bar.sync 	0;
	.loc	1 9 3
	ret;
}
	.file	1 \"/tmp/k.cu\"
";
        let l = parse_ptx(ptx, "k.cu", &|line| line >= 6);
        let lines: Vec<&str> = l.text.lines().collect();
        let at = |needle: &str| {
            let i = lines.iter().position(|x| x.contains(needle)).unwrap();
            (l.cuda_lines[i], l.inlined[i])
        };
        assert_eq!(at("add.f32"), (Some(8), Some(3)));
        assert_eq!(at("ld.param"), (None, None));
        assert_eq!(at("bar.sync"), (Some(8), Some(2)));
        assert_eq!((l.mapped(), l.no_source_line), (3, 1));
    }

    #[test]
    fn sass_lines_follow_their_line_info_comments() {
        let sass = "\n\t.text.k:\n\t//## File \"/tmp/k.cu\", line 5\n\
                    \x20       /*0000*/                   LDC R1, c[0x0][0x28] ;\n\
                    \t//## File \"/tmp/k.cu\", line 3 inlined at \"/tmp/k.cu\", line 8\n\
                    \t//## File \"/tmp/k.cu\", line 8\n\
                    \x20       /*00b0*/                   MUFU.EX2 R9, R9 ;\n\
                    \x20       /*00c0*/               @P0 EXIT ;\n\
                    \t//## File \"/tmp/k.cu\", line 2 inlined at \"/tmp/k.cu\", line 3\n\
                    \x20       /*00d0*/                   FADD R8, R8, R11 ;\n\
                    .L_x_0:\n\
                    \x20       /*01a0*/                   BRA `(.L_x_0);\n\
                    \x20       /*01b0*/                   NOP;\n";
        let l = parse_sass(sass, "k.cu", &|line| line >= 5);
        assert!(!l.text.contains("//##"));
        let lines: Vec<&str> = l.text.lines().collect();
        let at = |needle: &str| {
            let i = lines.iter().position(|x| x.contains(needle)).unwrap();
            (l.cuda_lines[i], l.inlined[i])
        };
        assert_eq!(at("LDC"), (Some(5), None));
        assert_eq!(at("MUFU"), (Some(8), Some(3)));
        assert_eq!(at("@P0 EXIT"), (Some(8), Some(3)));
        // A helper inlined into a helper: the last kernel line.
        assert_eq!(at("FADD"), (Some(8), Some(2)));
        // The padding at the end never runs: no line.
        assert_eq!(at("BRA `(.L_x_0)"), (None, None));
        assert_eq!(at("NOP;"), (None, None));
        assert_eq!(at(".L_x_0:"), (None, None));
        assert_eq!(
            sass_chain("//## File \"a.cu\", line 3 inlined at \"a.cu\", line 8"),
            [("a.cu".to_string(), 3), ("a.cu".to_string(), 8)]
        );
    }

    #[test]
    fn warnings_name_their_line() {
        assert_eq!(
            warning_line("k_kernel.cu(42): warning #177-D: unused", "k_kernel.cu"),
            Some(42)
        );
        assert_eq!(
            warning_line("ptxas warning : (C7508) setmaxnreg", "k.cu"),
            None
        );
    }
}
