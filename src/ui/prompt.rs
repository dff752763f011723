//! Prompts on the terminal (stderr): pick one of a list, or type a line. Esc cancels and
//! Ctrl-C interrupts (both exit 130, nothing done); whatever happens, the cursor is shown again
//! and the prompt's lines are cleared, leaving one line with the answer.
//!
//! Keys are read with `console`'s raw reads, which return Ctrl-C as a key instead of raising
//! SIGINT, so an interrupted prompt still cleans up. What a key does is decided by the plain
//! state machines [`Choice`] and [`Line`], tested without a terminal; [`select`] and [`input`]
//! only draw them.

use crate::error::{Error, Kind, Result};
use console::{Key, Term, measure_text_width, truncate_str};

/// What a key did to a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Keep reading keys.
    Continue,
    /// Enter: the answer is given.
    Submit,
    /// Esc: the user backs out.
    Cancel,
    /// Ctrl-C.
    Interrupt,
}

/// The state of a list prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub len: usize,
    pub selected: usize,
}

impl Choice {
    pub fn new(len: usize, default: usize) -> Choice {
        Choice {
            len,
            selected: default.min(len.saturating_sub(1)),
        }
    }

    pub fn key(&mut self, key: &Key) -> Step {
        match key {
            Key::ArrowDown | Key::Tab | Key::Char('j') => {
                self.selected = (self.selected + 1) % self.len.max(1);
            }
            Key::ArrowUp | Key::BackTab | Key::Char('k') => {
                self.selected = (self.selected + self.len.max(1) - 1) % self.len.max(1);
            }
            Key::Home => self.selected = 0,
            Key::End => self.selected = self.len.saturating_sub(1),
            Key::Enter | Key::Char(' ') if self.len > 0 => return Step::Submit,
            Key::Escape | Key::Char('q') => return Step::Cancel,
            Key::CtrlC => return Step::Interrupt,
            _ => {}
        }
        Step::Continue
    }

    /// The lines to draw: the prompt, then the items (a window around the selection when they
    /// do not fit in `rows`), each cut to `cols` so that none wraps.
    pub fn frame(&self, prompt: &str, items: &[String], rows: usize, cols: usize) -> Vec<String> {
        let fit = rows.saturating_sub(2).max(1);
        let first = if items.len() <= fit {
            0
        } else {
            self.selected.saturating_sub(fit / 2).min(items.len() - fit)
        };
        let mut lines = vec![format!(
            "? {prompt} (↑/↓ to move, Enter to choose, Esc to cancel)"
        )];
        for (i, item) in items.iter().enumerate().skip(first).take(fit) {
            let mark = if i == self.selected { "> " } else { "  " };
            lines.push(format!("{mark}{item}"));
        }
        lines
            .into_iter()
            .map(|l| truncate_str(&l, cols.saturating_sub(1).max(8), "…").into_owned())
            .collect()
    }
}

/// The state of a one-line text prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Line {
    pub chars: Vec<char>,
    /// Cursor position, in characters.
    pub pos: usize,
}

impl Line {
    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    pub fn key(&mut self, key: &Key) -> Step {
        match key {
            Key::Char(c) if !c.is_control() => {
                self.chars.insert(self.pos, *c);
                self.pos += 1;
            }
            Key::Backspace if self.pos > 0 => {
                self.pos -= 1;
                self.chars.remove(self.pos);
            }
            Key::Del if self.pos < self.chars.len() => {
                self.chars.remove(self.pos);
            }
            Key::ArrowLeft if self.pos > 0 => self.pos -= 1,
            Key::ArrowRight if self.pos < self.chars.len() => self.pos += 1,
            Key::Home => self.pos = 0,
            Key::End => self.pos = self.chars.len(),
            Key::Enter => return Step::Submit,
            Key::Escape => return Step::Cancel,
            Key::CtrlC => return Step::Interrupt,
            _ => {}
        }
        Step::Continue
    }

    /// The prompt line as drawn in `cols` columns (scrolled so the cursor is visible), and how
    /// many columns the cursor sits left of its end.
    pub fn frame(&self, head: &str, cols: usize) -> (String, usize) {
        let room = cols.saturating_sub(1 + measure_text_width(head)).max(4);
        let width = |cs: &[char]| measure_text_width(&cs.iter().collect::<String>());
        // Scroll: drop characters from the left until the text up to the cursor fits.
        let mut first = 0;
        while first < self.pos && width(&self.chars[first..self.pos]) >= room {
            first += 1;
        }
        let mut last = self.pos;
        while last < self.chars.len() && width(&self.chars[first..=last]) < room {
            last += 1;
        }
        let shown: String = self.chars[first..last].iter().collect();
        let back = width(&self.chars[self.pos..last]);
        (format!("{head}{shown}"), back)
    }
}

/// Draws frames over each other; on drop (however the prompt ends) clears the last one and
/// shows the cursor.
struct Screen {
    term: Term,
    /// Lines of the frame on screen; the cursor is on its last line.
    drawn: usize,
}

impl Screen {
    fn new() -> Screen {
        Screen {
            term: Term::stderr(),
            drawn: 0,
        }
    }

    fn size(&self) -> (usize, usize) {
        let (rows, cols) = self.term.size();
        (usize::from(rows.max(3)), usize::from(cols.max(20)))
    }

    fn clear(&mut self) -> std::io::Result<()> {
        if self.drawn > 0 {
            self.term.clear_line()?;
            self.term.clear_last_lines(self.drawn - 1)?;
            self.drawn = 0;
        }
        Ok(())
    }

    fn draw(&mut self, lines: &[String], back: usize) -> std::io::Result<()> {
        self.clear()?;
        self.term.write_str(&lines.join("\n"))?;
        self.drawn = lines.len();
        if back > 0 {
            self.term.move_cursor_left(back)?;
        }
        self.term.flush()
    }

    /// Replaces the prompt with one line saying what was chosen.
    fn done(&mut self, summary: &str) -> std::io::Result<()> {
        self.clear()?;
        self.term.write_line(summary)?;
        self.term.show_cursor()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.clear();
        let _ = self.term.show_cursor();
        let _ = self.term.flush();
    }
}

fn io_error(e: std::io::Error) -> Error {
    Error::failure(format!("the prompt failed: {e}"))
}

/// The error for Esc (`cancelled`) or Ctrl-C (`interrupted`): exit 130, nothing done.
fn stopped(step: Step) -> Error {
    let what = if step == Step::Cancel {
        "cancelled"
    } else {
        "interrupted"
    };
    Error {
        kind: Kind::Interrupted,
        message: format!("{what}; nothing was written"),
        ..Error::interrupted()
    }
}

/// Asks to pick one of `items`; returns its index.
pub fn select(prompt: &str, items: &[String], default: usize) -> Result<usize> {
    let mut screen = Screen::new();
    let mut state = Choice::new(items.len(), default);
    screen.term.hide_cursor().map_err(io_error)?;
    loop {
        let (rows, cols) = screen.size();
        screen
            .draw(&state.frame(prompt, items, rows, cols), 0)
            .map_err(io_error)?;
        let key = screen.term.read_key_raw().map_err(io_error)?;
        match state.key(&key) {
            Step::Continue => {}
            Step::Submit => {
                let chosen = items[state.selected].as_str();
                let (_, cols) = screen.size();
                let summary = format!("{prompt}: {chosen}");
                screen
                    .done(&truncate_str(&summary, cols - 1, "…"))
                    .map_err(io_error)?;
                return Ok(state.selected);
            }
            step => return Err(stopped(step)),
        }
    }
}

/// Asks for one line of text. Enter on an empty line takes `default`; `check` refuses an
/// answer with a message shown above the prompt.
pub fn input(
    prompt: &str,
    default: Option<&str>,
    check: impl Fn(&str) -> crate::Result<()>,
) -> Result<String> {
    let mut screen = Screen::new();
    let mut line = Line::default();
    let head = match default {
        Some(d) if !d.is_empty() => format!("? {prompt} [{d}]: "),
        _ => format!("? {prompt}: "),
    };
    let mut problem: Option<String> = None;
    loop {
        let (_, cols) = screen.size();
        let (text, back) = line.frame(&head, cols);
        let mut lines = Vec::new();
        if let Some(p) = &problem {
            lines.push(truncate_str(&format!("  ✘ {p}"), cols - 1, "…").into_owned());
        }
        lines.push(text);
        screen.draw(&lines, back).map_err(io_error)?;
        let key = screen.term.read_key_raw().map_err(io_error)?;
        match line.key(&key) {
            Step::Continue => {}
            Step::Submit => {
                let typed = line.text();
                let answer = match (typed.is_empty(), default) {
                    (true, Some(d)) => d.to_string(),
                    _ => typed,
                };
                match check(&answer) {
                    Ok(()) => {
                        let summary = format!("{prompt}: {answer}");
                        screen
                            .done(&truncate_str(&summary, cols - 1, "…"))
                            .map_err(io_error)?;
                        return Ok(answer);
                    }
                    Err(p) => problem = Some(p.message),
                }
            }
            step => return Err(stopped(step)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choice_keys() {
        let mut c = Choice::new(3, 1);
        assert_eq!(c.key(&Key::ArrowDown), Step::Continue);
        assert_eq!(c.selected, 2);
        c.key(&Key::ArrowDown);
        assert_eq!(c.selected, 0, "wraps");
        c.key(&Key::ArrowUp);
        assert_eq!(c.selected, 2);
        c.key(&Key::Home);
        assert_eq!(c.selected, 0);
        assert_eq!(c.key(&Key::Enter), Step::Submit);
        assert_eq!(c.key(&Key::Escape), Step::Cancel);
        assert_eq!(c.key(&Key::Char('q')), Step::Cancel);
        assert_eq!(c.key(&Key::CtrlC), Step::Interrupt);
        assert_eq!(Choice::new(2, 9).selected, 1);
    }

    #[test]
    fn choice_frames_fit_the_terminal() {
        let items: Vec<String> = (0..10)
            .map(|i| format!("item {i} — {}", "x".repeat(50)))
            .collect();
        let mut c = Choice::new(items.len(), 0);
        let f = c.frame("Template", &items, 6, 30);
        assert_eq!(f.len(), 5, "prompt + rows-2 items: {f:?}");
        assert!(f[1].starts_with("> item 0"));
        assert!(f.iter().all(|l| measure_text_width(l) < 30), "{f:?}");
        c.selected = 9;
        let f = c.frame("Template", &items, 6, 30);
        assert!(f.last().unwrap().starts_with("> item 9"), "{f:?}");
        let f = c.frame("Template", &items[..2], 24, 200);
        assert_eq!(f.len(), 3);
    }

    #[test]
    fn line_editing() {
        let mut l = Line::default();
        for k in "mnst".chars() {
            l.key(&Key::Char(k));
        }
        l.key(&Key::ArrowLeft);
        l.key(&Key::ArrowLeft);
        l.key(&Key::Char('i'));
        assert_eq!(l.text(), "mnist");
        assert_eq!(l.pos, 3);
        l.key(&Key::End);
        l.key(&Key::Backspace);
        l.key(&Key::Home);
        l.key(&Key::Del);
        assert_eq!(l.text(), "nis");
        assert_eq!(l.key(&Key::Char('\u{7}')), Step::Continue);
        assert_eq!(l.text(), "nis", "control characters are not typed");
        assert_eq!(l.key(&Key::Enter), Step::Submit);
        assert_eq!(l.key(&Key::Escape), Step::Cancel);
        assert_eq!(l.key(&Key::CtrlC), Step::Interrupt);
    }

    #[test]
    fn a_long_line_scrolls_and_never_wraps() {
        let mut l = Line::default();
        for c in "registry.example.com/team/very-long-image-name".chars() {
            l.key(&Key::Char(c));
        }
        let (shown, back) = l.frame("? Image: ", 30);
        assert!(measure_text_width(&shown) < 30, "{shown}");
        assert!(shown.ends_with("image-name"), "{shown}");
        assert_eq!(back, 0);
        l.key(&Key::Home);
        let (shown, back) = l.frame("? Image: ", 30);
        assert!(shown.starts_with("? Image: registry"), "{shown}");
        assert!(measure_text_width(&shown) < 30, "{shown}");
        assert_eq!(back, measure_text_width(&shown) - "? Image: ".len());
    }

    #[test]
    fn esc_and_ctrl_c_exit_130() {
        assert_eq!(stopped(Step::Cancel).exit_code(), 130);
        assert_eq!(
            stopped(Step::Interrupt).to_string(),
            "interrupted; nothing was written"
        );
    }
}
