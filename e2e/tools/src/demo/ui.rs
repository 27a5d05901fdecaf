//! What the demo prints: numbered steps, indented lines, ✓ and ✗. Colour only on a
//! terminal, and never with NO_COLOR set.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

pub struct Ui {
    color: bool,
    step: usize,
    /// Each step's short name and how long it took; the last one is still running.
    timings: Vec<(&'static str, Instant, Option<Duration>)>,
}

const INDENT: &str = "   ";

impl Ui {
    pub fn new(first_step: usize) -> Self {
        Ui {
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            step: first_step,
            timings: Vec::new(),
        }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }

    /// `\n4. Title`, numbered from the first step given; `short` names it in
    /// [`Ui::timings`].
    pub fn step(&mut self, title: &str, short: &'static str) {
        self.end_step();
        println!("\n{}", self.bold(&format!("{}. {title}", self.step)));
        self.step += 1;
        self.timings.push((short, Instant::now(), None));
    }

    /// Stops the clock of the step under way.
    pub fn end_step(&mut self) {
        if let Some((_, began, took @ None)) = self.timings.last_mut() {
            *took = Some(began.elapsed());
        }
    }

    /// `install 3.1s, app and backup 9.0s, ...` for the steps so far.
    pub fn timings(&self) -> String {
        self.timings
            .iter()
            .map(|(name, began, took)| {
                let took = took.unwrap_or_else(|| began.elapsed());
                format!("{name} {:.1}s", took.as_secs_f64())
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn line(&self, text: &str) {
        println!("{INDENT}{text}");
    }

    pub fn ok(&self, text: &str) {
        println!("{INDENT}{} {text}", self.green("✓"));
    }

    pub fn bad(&self, text: &str) {
        println!("{INDENT}{} {text}", self.red("✗"));
    }

    /// A command as the reader would type it.
    pub fn command(&self, text: &str) {
        println!("{INDENT}{}", self.bold(&format!("$ {text}")));
    }
}

/// Pads `text` to `width` characters (not bytes), for columns.
pub fn pad(text: &str, width: usize) -> String {
    let len = text.chars().count();
    format!("{text}{}", " ".repeat(width.saturating_sub(len)))
}
