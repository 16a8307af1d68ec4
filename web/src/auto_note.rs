//! The automatic schedule of a program without one, as the page shows it: takes the launch
//! plan's [`AutoScheduleNote`]; emits the one-line headline the CUDA and Launch plan panes show
//! (which scheduler chose what and why, or loudly that none did and the kernel is the serial
//! default), and the program with the schedule appended as a `schedule { }` block (the
//! "Insert schedule" action: from then on it is the user's schedule).

use hopfuse::plan::AutoScheduleNote;

/// What the page says about an automatic schedule; `serial`: no scheduler took the fusion, so
/// the kernel is one thread of one block (said loudly).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Headline {
    pub text: String,
    pub serial: bool,
}

/// The headline for `note`.
pub fn headline(note: &AutoScheduleNote) -> Headline {
    match &note.scheduler {
        Some(scheduler) => Headline {
            text: format!(
                "No schedule in the program: the automatic {scheduler} scheduler wrote one. {}",
                sentence(&note.reason)
            ),
            serial: false,
        },
        None => Headline {
            text: format!(
                "No schedule, and no scheduler took this fusion: the kernel is the serial default \
                 (one thread in one block), far from the GPU's speed. Why: {}",
                sentence(&note.reason)
            ),
            serial: true,
        },
    }
}

/// `text` with its first letter capitalised and a full stop.
fn sentence(text: &str) -> String {
    let text = text.trim().trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => format!("{}{}.", first.to_uppercase(), chars.as_str()),
        None => String::new(),
    }
}

/// The `schedule { }` block a scheduler wrote, as a program holds it (what `hopfuse schedule`
/// prints); None when no scheduler took the fusion (a schedule that did not apply is not
/// offered: it would not compile).
pub fn schedule_block(note: &AutoScheduleNote) -> Option<String> {
    note.scheduler.as_ref()?;
    let text = note.schedule.as_ref()?;
    let mut block = String::from("schedule {\n");
    for line in text.lines() {
        block.push_str("  ");
        block.push_str(line);
        block.push('\n');
    }
    block.push_str("}\n");
    Some(block)
}

/// `program` with `block` appended after its last line.
pub fn with_schedule(program: &str, block: &str) -> String {
    let mut out = program.trim_end().to_string();
    out.push('\n');
    out.push_str(block);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADD: &str = "fusion add {\n  input a: f32[M, N]\n  input b: f32[M, N]\n  c = a + b\n  output c\n}\n// bench: M=4096,N=4096\n";

    fn sizes() -> std::collections::BTreeMap<String, i64> {
        [("M".to_string(), 4096), ("N".to_string(), 4096)].into()
    }

    fn note(program: &str) -> AutoScheduleNote {
        let c = crate::model::compile(program, &sizes()).expect("compiles");
        c.plan.auto_schedule.expect("no schedule: an automatic one")
    }

    #[test]
    fn a_scheduled_fusion_names_its_scheduler_and_inserts_as_the_users_schedule() {
        let n = note(ADD);
        let h = headline(&n);
        assert!(!h.serial);
        assert!(
            h.text.contains("the automatic pointwise scheduler"),
            "{}",
            h.text
        );
        assert!(h.text.ends_with('.'), "{}", h.text);
        let block = schedule_block(&n).expect("a block");
        assert!(
            block.starts_with("schedule {\n  ") && block.ends_with("}\n"),
            "{block}"
        );
        let program = with_schedule(ADD, &block);
        assert!(program.starts_with(ADD.trim_end()), "{program}");
        // The inserted schedule is the user's now and compiles to the same kernel.
        let auto = crate::model::compile(ADD, &sizes()).unwrap();
        let own =
            crate::model::compile(&program, &sizes()).expect("the inserted schedule compiles");
        assert_eq!(own.plan.auto_schedule, None);
        assert_eq!(own.cuda, auto.cuda);
    }

    #[test]
    fn a_fusion_no_scheduler_takes_is_said_loudly_with_the_reason() {
        // No scheduler takes a reduction over two axes.
        let total =
            "fusion total {\n  input x: f32[B, M, N]\n  s = sum(x, axis=[1, 2])\n  output s\n}\n";
        let h = headline(&note(total));
        assert!(h.serial, "{}", h.text);
        assert!(h.text.contains("several axes"), "{}", h.text);
        assert_eq!(schedule_block(&note(total)), None);
        let declined = AutoScheduleNote {
            scheduler: None,
            reason: "no automatic schedule (a gather); compiled with the serial default".into(),
            schedule: None,
        };
        let h = headline(&declined);
        assert!(h.serial);
        assert!(
            h.text.contains("serial default (one thread in one block)"),
            "{}",
            h.text
        );
        assert!(
            h.text.ends_with(
                "Why: No automatic schedule (a gather); compiled with the serial default."
            ),
            "{}",
            h.text
        );
        assert_eq!(schedule_block(&declined), None);
        // A schedule that did not apply is not offered.
        let failed = AutoScheduleNote {
            schedule: Some("c.split(0, 4)".into()),
            ..declined
        };
        assert_eq!(schedule_block(&failed), None);
    }
}
