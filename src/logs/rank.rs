//! Ranks: which MPI rank wrote a line of the launcher's log. The launcher (mpirun, horovodrun)
//! relays every rank's output and marks it with a tag; this module is the one place that reads
//! a tag into a rank and strips it, for both engines (the tail of a pod and of a Docker
//! container hand every launcher line to [`Ranks::split`] through the printer's line format).
//!
//! The forms, exactly as the launchers write them:
//! - Open MPI `--tag-output`: `[JOBID,RANK]<stdout>:` (also `<stderr>:`, `<stddiag>:`);
//! - horovodrun over Gloo: `[RANK]<stdout>:` / `[RANK]<stderr>:`;
//! - Hydra (MPICH, Intel MPI) `-prepend-rank`: `[RANK] `.
//!
//! Elastic horovodrun tags in the Gloo form with the rank each process had when it started;
//! a reset re-ranks the processes but their tags stay, and nothing in the output says the
//! new rank. Its label (`horovodrun-elastic`) says so, and lines show `sN` (start rank N)
//! instead of `rN`, JSON `startRank` instead of `rank`.
//!
//! No false positives from guessing: a line is only read for a tag when hvdctl asked the
//! launcher for tags in this run, which the launcher's pod or container says in its
//! [`LABEL_RANK_TAGS`] label (set at deploy time from `mpi.launcher` and
//! `mpi.implementation`), and only the forms that launcher writes are recognised, at the
//! start of the line. Lines of runs without the label (deployed before, or by hand) and lines
//! that merely look like a tag (`[3] done` under Open MPI) are shown as they are.
//!
//! Open MPI tags what it reads from a rank's pipe, one read at a time: a rank that writes a
//! line in several writes (Python's `print` with `PYTHONUNBUFFERED=1` writes the text, then
//! the newline) can come out as `[1,0]<stdout>:text[1,0]<stdout>:` + newline, or with another
//! rank's piece in between. So a launcher line is cut at every tag of the same form in it: the
//! last piece ends a line of its rank, the ones before are held (per rank and stream) until
//! their rank's line ends. Nothing is lost: a held piece is shown once it ends with `\r` (a
//! progress update), grows past [`HELD_MAX`], or the log ends ([`Ranks::finish`]).

use std::collections::BTreeMap;

/// The label on a run's launcher naming the tag forms its lines carry (see [`TagForms`]).
pub const LABEL_RANK_TAGS: &str = "hvdctl.io/rank-tags";

/// A held piece of a rank's line is shown as a line of its own past this size.
pub const HELD_MAX: usize = 64 * 1024;

/// The tag forms a launcher's lines may start with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct TagForms {
    /// Open MPI `--tag-output`: `[JOBID,RANK]<stdout>:`.
    pub open_mpi: bool,
    /// horovodrun's own forwarding (Gloo): `[RANK]<stdout>:`.
    pub gloo: bool,
    /// Hydra `-prepend-rank`: `[RANK] `.
    pub hydra: bool,
    /// The ranks of the tags are the ranks the processes had when they started, not the
    /// ones they have now: horovodrun's elastic mode tags each process's output with its
    /// first rank and keeps that tag when a reset (a worker lost or added) re-ranks the
    /// processes. Shown as `sN` ("start rank N") rather than `rN`.
    pub start_ranks: bool,
}

impl TagForms {
    /// No tags: every line shown as it is.
    pub const NONE: TagForms = TagForms {
        open_mpi: false,
        gloo: false,
        hydra: false,
        start_ranks: false,
    };
    /// `mpirun --tag-output` of Open MPI.
    pub const OPEN_MPI: TagForms = TagForms {
        open_mpi: true,
        ..TagForms::NONE
    };
    /// `mpirun -prepend-rank` of MPICH or Intel MPI.
    pub const HYDRA: TagForms = TagForms {
        hydra: true,
        ..TagForms::NONE
    };
    /// horovodrun with Open MPI: it runs `mpirun --tag-output`, or its Gloo driver.
    pub const HOROVODRUN: TagForms = TagForms {
        open_mpi: true,
        gloo: true,
        hydra: false,
        start_ranks: false,
    };
    /// horovodrun with MPICH or Intel MPI: `mpirun -l` (Hydra's form), or its Gloo driver.
    pub const HOROVODRUN_HYDRA: TagForms = TagForms {
        open_mpi: false,
        gloo: true,
        hydra: true,
        start_ranks: false,
    };
    /// Elastic horovodrun (always its Gloo driver): `[RANK]<stdout>:`, RANK the process's
    /// rank when it started.
    pub const HOROVODRUN_ELASTIC: TagForms = TagForms {
        open_mpi: false,
        gloo: true,
        hydra: false,
        start_ranks: true,
    };

    const NAMED: [(&'static str, TagForms); 5] = [
        ("open-mpi", TagForms::OPEN_MPI),
        ("hydra", TagForms::HYDRA),
        ("horovodrun", TagForms::HOROVODRUN),
        ("horovodrun-hydra", TagForms::HOROVODRUN_HYDRA),
        ("horovodrun-elastic", TagForms::HOROVODRUN_ELASTIC),
    ];

    /// The value of [`LABEL_RANK_TAGS`] (None for [`TagForms::NONE`]).
    pub fn label(self) -> Option<&'static str> {
        TagForms::NAMED
            .iter()
            .find(|(_, f)| *f == self)
            .map(|(n, _)| *n)
    }

    /// The forms a label value names; an unknown value names none (lines shown as they are).
    pub fn from_label(value: &str) -> TagForms {
        TagForms::NAMED
            .iter()
            .find(|(n, _)| *n == value)
            .map_or(TagForms::NONE, |(_, f)| *f)
    }

    /// The forms a launcher's labels name (none for other roles).
    pub fn of_labels<'a>(role: &str, label: impl FnOnce(&str) -> Option<&'a str>) -> TagForms {
        if role != crate::kinds::ROLE_LAUNCHER {
            return TagForms::NONE;
        }
        label(LABEL_RANK_TAGS).map_or(TagForms::NONE, TagForms::from_label)
    }

    pub fn is_none(self) -> bool {
        self == TagForms::NONE
    }
}

/// Which of a rank's outputs a tag names (`<stdout>`, `<stderr>`, `<stddiag>`; Hydra's tag
/// names none).
type Stream = u8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// Open MPI, with the job id of the tag.
    OpenMpi(u32),
    Gloo,
    Hydra,
}

/// A tag at the start of a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tag {
    rank: u32,
    stream: Stream,
    form: Form,
    /// Bytes of the tag.
    len: usize,
}

/// A decimal number as the launchers print it (no sign, no leading zero, at most 9 digits) at
/// the start of `s`: its value and length.
fn number(s: &[u8]) -> Option<(u32, usize)> {
    let n = s.iter().take(10).take_while(|c| c.is_ascii_digit()).count();
    if n == 0 || n > 9 || (n > 1 && s[0] == b'0') {
        return None;
    }
    let v = s[..n]
        .iter()
        .fold(0u32, |v, c| v * 10 + u32::from(c - b'0'));
    Some((v, n))
}

/// `<stdout>:`, `<stderr>:` or `<stddiag>:` at the start of `s`.
fn stream_mark(s: &[u8]) -> Option<(Stream, usize)> {
    const MARKS: [&[u8]; 3] = [b"<stdout>:", b"<stderr>:", b"<stddiag>:"];
    MARKS
        .iter()
        .position(|m| s.starts_with(m))
        .map(|i| (i as Stream, MARKS[i].len()))
}

/// The tag of one of `forms` at the start of `s`.
fn tag_at(forms: TagForms, s: &[u8]) -> Option<Tag> {
    if s.first() != Some(&b'[') {
        return None;
    }
    let (first, n) = number(&s[1..])?;
    let i = 1 + n;
    match s.get(i)? {
        b',' if forms.open_mpi => {
            let (rank, m) = number(&s[i + 1..])?;
            let j = i + 1 + m;
            if s.get(j) != Some(&b']') {
                return None;
            }
            let (stream, k) = stream_mark(&s[j + 1..])?;
            Some(Tag {
                rank,
                stream,
                form: Form::OpenMpi(first),
                len: j + 1 + k,
            })
        }
        b']' => {
            let rest = &s[i + 1..];
            if forms.gloo
                && let Some((stream, k)) = stream_mark(rest)
            {
                return Some(Tag {
                    rank: first,
                    stream,
                    form: Form::Gloo,
                    len: i + 1 + k,
                });
            }
            if forms.hydra && rest.first() == Some(&b' ') {
                return Some(Tag {
                    rank: first,
                    stream: 0,
                    form: Form::Hydra,
                    len: i + 2,
                });
            }
            None
        }
        _ => None,
    }
}

/// The next tag of the same form as `like` in `s` from `from` on: its position and the tag.
/// (Hydra's tag is only read at the start of a line: `[3] ` is too common in text.)
fn next_tag(s: &[u8], from: usize, like: Form) -> Option<(usize, Tag)> {
    let forms = match like {
        Form::OpenMpi(_) => TagForms::OPEN_MPI,
        Form::Gloo => TagForms {
            gloo: true,
            ..TagForms::NONE
        },
        Form::Hydra => return None,
    };
    let mut at = from;
    while let Some(p) = memchr::memchr(b'[', &s[at..]) {
        let pos = at + p;
        if let Some(t) = tag_at(forms, &s[pos..])
            && t.form == like
        {
            return Some((pos, t));
        }
        at = pos + 1;
    }
    None
}

/// A piece of a rank's line held until the line ends: the time of its first part, the text.
#[derive(Debug, Default)]
struct Held {
    ts: Vec<u8>,
    text: Vec<u8>,
}

/// The rank reading of one launcher's log: which forms to read, and the pieces of lines
/// held per rank and stream.
#[derive(Debug, Default)]
pub struct Ranks {
    forms: TagForms,
    held: BTreeMap<(u32, Stream), Held>,
}

impl Ranks {
    pub fn new(forms: TagForms) -> Ranks {
        Ranks {
            forms,
            held: BTreeMap::new(),
        }
    }

    /// Whether lines are read for tags at all.
    pub fn reads_tags(&self) -> bool {
        !self.forms.is_none()
    }

    /// One line of the log (without its newline), stamped `ts`: calls `emit(ts, rank, text)`
    /// for each line it completes, tag stripped (rank None: not tagged, shown as it is).
    pub fn split(
        &mut self,
        ts: &[u8],
        line: &[u8],
        emit: &mut impl FnMut(&[u8], Option<u32>, &[u8]),
    ) {
        let Some(mut tag) = tag_at(self.forms, line) else {
            return emit(ts, None, line);
        };
        let mut start = tag.len;
        while let Some((pos, next)) = next_tag(line, start, tag.form) {
            self.hold(ts, tag, &line[start..pos], emit);
            (tag, start) = (next, pos + next.len);
        }
        let text = &line[start..];
        match self.held.remove(&(tag.rank, tag.stream)) {
            Some(mut h) => {
                h.text.extend_from_slice(text);
                emit(&h.ts, Some(tag.rank), &h.text);
            }
            None => emit(ts, Some(tag.rank), text),
        }
    }

    /// A piece of a line of `tag`'s rank that a tag follows: kept until the line ends.
    fn hold(
        &mut self,
        ts: &[u8],
        tag: Tag,
        text: &[u8],
        emit: &mut impl FnMut(&[u8], Option<u32>, &[u8]),
    ) {
        let key = (tag.rank, tag.stream);
        let h = self.held.entry(key).or_default();
        if h.text.is_empty() {
            h.ts = ts.to_vec();
        }
        h.text.extend_from_slice(text);
        if h.text.ends_with(b"\r") || h.text.len() >= HELD_MAX {
            let h = self.held.remove(&key).unwrap_or_default();
            let text = h.text.strip_suffix(b"\r").unwrap_or(&h.text);
            emit(&h.ts, Some(tag.rank), text);
        } else if h.text.is_empty() {
            self.held.remove(&key);
        }
    }

    /// The end of the log: every held piece as a line of its rank, in rank order.
    pub fn finish(&mut self, emit: &mut impl FnMut(&[u8], Option<u32>, &[u8])) {
        for ((rank, _), h) in std::mem::take(&mut self.held) {
            emit(&h.ts, Some(rank), &h.text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines `forms` makes of `log` (one launcher line per element), as `rN text` or
    /// `- text` for untagged ones, the held pieces last.
    fn read(forms: TagForms, log: &[&str]) -> Vec<String> {
        let mut r = Ranks::new(forms);
        let mut out = Vec::new();
        let mut emit = |_: &[u8], rank: Option<u32>, text: &[u8]| {
            let text = String::from_utf8_lossy(text);
            out.push(match rank {
                Some(n) => format!("r{n} {text}"),
                None => format!("- {text}"),
            })
        };
        for l in log {
            r.split(b"t", l.as_bytes(), &mut emit);
        }
        r.finish(&mut emit);
        out
    }

    #[test]
    fn every_form_gives_its_rank_and_is_stripped() {
        assert_eq!(
            read(
                TagForms::OPEN_MPI,
                &[
                    "[1,0]<stdout>:rank 0 of 4",
                    "[1,13]<stderr>:oops",
                    "[1,2]<stddiag>:diag",
                    "[1,3]<stdout>:",
                    "[1,1]<stdout>: two spaces kept  ",
                ]
            ),
            [
                "r0 rank 0 of 4",
                "r13 oops",
                "r2 diag",
                "r3 ",
                "r1  two spaces kept  "
            ]
        );
        assert_eq!(
            read(
                TagForms::HOROVODRUN,
                &["[0]<stdout>:gloo", "[12]<stderr>:err", "[1,1]<stdout>:mpi"]
            ),
            ["r0 gloo", "r12 err", "r1 mpi"]
        );
        assert_eq!(
            read(TagForms::HYDRA, &["[0] mpich", "[10] ten", "[3] "]),
            ["r0 mpich", "r10 ten", "r3 "]
        );
        assert_eq!(
            read(TagForms::HOROVODRUN_HYDRA, &["[1] x", "[2]<stdout>:y"]),
            ["r1 x", "r2 y"]
        );
    }

    #[test]
    fn only_the_forms_of_the_run_at_the_start_of_a_line() {
        // Not tagged by this run's launcher: shown as they are.
        assert_eq!(
            read(
                TagForms::NONE,
                &["[1,0]<stdout>:x", "[0] y", "[0]<stdout>:z"]
            ),
            ["- [1,0]<stdout>:x", "- [0] y", "- [0]<stdout>:z"]
        );
        assert_eq!(
            read(TagForms::OPEN_MPI, &["[3] done", "[3]<stdout>:gloo form"]),
            ["- [3] done", "- [3]<stdout>:gloo form"]
        );
        assert_eq!(
            read(TagForms::HYDRA, &["[1,0]<stdout>:x", "[0]<stdout>:y"]),
            ["- [1,0]<stdout>:x", "- [0]<stdout>:y"]
        );
        // Not at the start.
        assert_eq!(
            read(TagForms::HYDRA, &[" [0] x", "launcher: [0] y"]),
            ["-  [0] x", "- launcher: [0] y"]
        );
        assert_eq!(
            read(TagForms::OPEN_MPI, &["mpirun says [1,0]<stdout>:x"]),
            ["- mpirun says [1,0]<stdout>:x"]
        );
    }

    #[test]
    fn partial_and_garbled_tags_are_text() {
        let garbled = [
            "",
            "[",
            "[1",
            "[1,",
            "[1,0",
            "[1,0]",
            "[1,0]<std",
            "[1,0]<stdout>",
            "[1,0]<stdin>:x",
            "[1,0]<STDOUT>:x",
            "[1,0] <stdout>:x",
            "[1, 0]<stdout>:x",
            "[-1,0]<stdout>:x",
            "[1,-0]<stdout>:x",
            "[1,00]<stdout>:x",
            "[1,01]<stdout>:x",
            "[1,0,2]<stdout>:x",
            "[1,9999999999]<stdout>:x",
            "[a,0]<stdout>:x",
            "[0]",
            "[0]x",
            "[0]  ",
            "[00] x",
            "[+1] x",
            "[ 1] x",
            "[1]\tx",
            "[0]<stdout> x",
            "[99999999999] x",
            "[0\u{663}] x",
        ];
        let all = TagForms {
            open_mpi: true,
            gloo: true,
            hydra: true,
            start_ranks: false,
        };
        for g in garbled {
            let got = read(all, &[g]);
            if g == "[0]  " {
                // A Hydra tag and a one-space line.
                assert_eq!(got, ["r0  "]);
                continue;
            }
            assert_eq!(got, [format!("- {g}")], "{g:?}");
        }
    }

    #[test]
    fn a_line_written_in_pieces_is_put_back_together() {
        // What was seen with horovodrun: print() wrote the text, then the newline.
        assert_eq!(
            read(
                TagForms::HOROVODRUN,
                &[
                    "[1,0]<stdout>:data: synthetic (DATA_DIR is not set)[1,0]<stdout>:",
                    "[1,0]<stdout>:epoch 1[1,0]<stdout>: loss 0.5[1,0]<stdout>:",
                ]
            ),
            [
                "r0 data: synthetic (DATA_DIR is not set)",
                "r0 epoch 1 loss 0.5"
            ]
        );
        // Another rank's piece in between; each rank's line whole and its own.
        assert_eq!(
            read(
                TagForms::OPEN_MPI,
                &[
                    "[1,0]<stdout>:rank 0 [1,1]<stdout>:rank 1 says hi",
                    "[1,0]<stdout>:says hi",
                    "[1,1]<stderr>:to stderr[1,1]<stdout>:next",
                    "[1,1]<stderr>:",
                ]
            ),
            [
                "r1 rank 1 says hi",
                "r0 rank 0 says hi",
                "r1 next",
                "r1 to stderr"
            ]
        );
        // A tag of another job id mid-line is text.
        assert_eq!(
            read(TagForms::OPEN_MPI, &["[1,0]<stdout>:a[2,0]<stdout>:b"]),
            ["r0 a[2,0]<stdout>:b"]
        );
        // Hydra's tag is not read mid-line.
        assert_eq!(read(TagForms::HYDRA, &["[0] a [1] b"]), ["r0 a [1] b"]);
    }

    #[test]
    fn held_pieces_come_out_at_a_carriage_return_a_size_or_the_end() {
        assert_eq!(
            read(
                TagForms::HOROVODRUN,
                &["[0]<stdout>:10%\r[0]<stdout>:20%\r[0]<stdout>:done"]
            ),
            ["r0 10%", "r0 20%", "r0 done"]
        );
        assert_eq!(
            read(TagForms::OPEN_MPI, &["[1,2]<stdout>:no end[1,3]<stdout>:x"]),
            ["r3 x", "r2 no end"]
        );
        let big = "y".repeat(HELD_MAX);
        let got = read(
            TagForms::OPEN_MPI,
            &[&format!("[1,0]<stdout>:{big}[1,0]<stdout>:tail")],
        );
        assert_eq!(got, [format!("r0 {big}"), "r0 tail".into()]);
    }

    #[test]
    fn a_held_line_keeps_the_time_of_its_first_piece() {
        let mut r = Ranks::new(TagForms::OPEN_MPI);
        let mut got = Vec::new();
        let mut emit = |ts: &[u8], rank: Option<u32>, text: &[u8]| {
            got.push(format!(
                "{} r{} {}",
                String::from_utf8_lossy(ts),
                rank.unwrap(),
                String::from_utf8_lossy(text)
            ))
        };
        r.split(b"t1", b"[1,0]<stdout>:a[1,1]<stdout>:c", &mut emit);
        r.split(b"t2", b"[1,0]<stdout>:b[1,0]<stdout>:", &mut emit);
        r.split(b"t3", b"[1,2]<stdout>:x[1,1]<stdout>:y", &mut emit);
        r.finish(&mut emit);
        assert_eq!(got, ["t1 r1 c", "t1 r0 ab", "t3 r1 y", "t3 r2 x"]);
    }

    #[test]
    fn labels_round_trip_and_only_launchers_read_them() {
        for f in [
            TagForms::OPEN_MPI,
            TagForms::HYDRA,
            TagForms::HOROVODRUN,
            TagForms::HOROVODRUN_HYDRA,
        ] {
            let l = f.label().unwrap();
            assert_eq!(TagForms::from_label(l), f);
            assert_eq!(TagForms::of_labels("launcher", |_| Some(l)), f);
            assert_eq!(TagForms::of_labels("worker", |_| Some(l)), TagForms::NONE);
        }
        assert_eq!(TagForms::NONE.label(), None);
        assert_eq!(TagForms::from_label("open-mpi-5"), TagForms::NONE);
        assert_eq!(TagForms::of_labels("launcher", |_| None), TagForms::NONE);
    }
}
