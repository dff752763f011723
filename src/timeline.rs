//! Horovod's timeline read as a straggler report: which rank was the last to be ready in a
//! collective's negotiation, and for how long it held the others.
//!
//! The file is what rank 0 writes with `HOROVOD_TIMELINE` (Horovod 0.28,
//! `horovod/common/timeline.cc`): a Chrome-trace JSON array whose `pid` is a tensor (named by
//! a `process_name` metadata event), each negotiation a `B` event `NEGOTIATE_<OP>` … `E`,
//! and inside it one `X` event per rank named by the rank's number, written when rank 0's
//! coordinator handled that rank's request (`Controller::IncrementTensorCount`,
//! `horovod/common/controller.cc`). Timestamps are microseconds. A tensor served from
//! Horovod's response cache is negotiated without the per-rank events
//! (`response_cache.cc`), so `timeline:` turns the cache off (see `backend::values`).
//!
//! The file is read as a stream (one event at a time, never whole): while the run runs, its
//! end is torn or lacks the closing `]`; what was read up to there is the report, and it
//! says it is partial.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;

use serde::Deserialize;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};

use crate::error::{Error, Result};

/// Horovod's default cycle: requests are handled once per cycle, so a rank that was ready
/// less than this after the others was not late (rank 0 handles the ranks one after the
/// other within a cycle, microseconds apart).
pub const CYCLE_US: i64 = 1_000;

/// One event of the trace, with what the report needs.
#[derive(Deserialize)]
struct Event {
    ph: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    ts: Option<i64>,
    #[serde(default)]
    pid: Option<u64>,
    #[serde(default)]
    args: Option<Args>,
}

#[derive(Deserialize)]
struct Args {
    #[serde(default)]
    name: Option<String>,
}

/// A negotiation being read: its start and the ranks ready so far.
struct Open {
    start: i64,
    ready: Vec<(u32, i64)>,
}

/// What was read so far.
#[derive(Default)]
pub struct Timeline {
    names: BTreeMap<u64, String>,
    /// Per tensor (pid): its open `B` events, and the negotiation among them.
    stacks: BTreeMap<u64, Vec<String>>,
    open: BTreeMap<u64, Open>,
    /// Per tensor: each negotiation's length (µs), how long the first ready rank waited.
    waits: BTreeMap<u64, Vec<i64>>,
    /// Per rank: how long it held the others each time it was the last one, late (µs).
    held: BTreeMap<u32, Vec<i64>>,
    ranks: u32,
    negotiations: u64,
    /// Negotiations with every rank's ready time (not from the response cache).
    with_ranks: u64,
    first_ts: Option<i64>,
    last_ts: i64,
    events: u64,
    /// The file ended before its closing `]` (the run still writes it).
    pub partial: bool,
}

impl Timeline {
    /// Reads a timeline from `r` event by event. A file cut short (a run still writing) is
    /// read up to its last whole event and marked [`Timeline::partial`]; anything else that
    /// is not a timeline is an error naming `what`.
    pub fn read(r: impl Read, what: &str) -> Result<Timeline> {
        let mut t = Timeline::default();
        let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::new(r));
        match (&mut t).deserialize(&mut de) {
            Ok(()) => {}
            Err(e) if e.is_eof() => t.partial = true,
            Err(e) if t.events > 0 && e.is_syntax() => {
                // A write torn mid-event: the file goes on being written.
                t.partial = true;
            }
            Err(e) => {
                return Err(Error::input(format!(
                    "{what} is not a Horovod timeline (a JSON array of trace events): {e}"
                )));
            }
        }
        if t.events == 0 && !t.partial {
            return Err(Error::input(format!("{what} holds no events")));
        }
        Ok(t)
    }

    fn event(&mut self, e: Event) {
        self.events += 1;
        if let Some(ts) = e.ts {
            self.first_ts.get_or_insert(ts);
            self.last_ts = self.last_ts.max(ts);
        }
        let Some(pid) = e.pid else { return }; // CYCLE_START marks have none
        let ts = e.ts.unwrap_or_default();
        match e.ph.as_str() {
            "M" if e.name.as_deref() == Some("process_name") && pid > 0 => {
                if let Some(name) = e.args.and_then(|a| a.name) {
                    self.names.insert(pid, name);
                }
            }
            "B" => {
                let name = e.name.unwrap_or_default();
                if name.starts_with("NEGOTIATE_") {
                    self.open.insert(
                        pid,
                        Open {
                            start: ts,
                            ready: Vec::new(),
                        },
                    );
                }
                self.stacks.entry(pid).or_default().push(name);
            }
            "X" => {
                let rank = e.name.as_deref().and_then(|n| n.parse::<u32>().ok());
                if let (Some(open), Some(rank)) = (self.open.get_mut(&pid), rank) {
                    open.ready.push((rank, ts));
                }
            }
            "E" => {
                let closed = self.stacks.get_mut(&pid).and_then(Vec::pop);
                if closed.is_some_and(|n| n.starts_with("NEGOTIATE_"))
                    && let Some(open) = self.open.remove(&pid)
                {
                    self.negotiated(pid, open, ts);
                }
            }
            _ => {}
        }
    }

    fn negotiated(&mut self, pid: u64, open: Open, end: i64) {
        self.negotiations += 1;
        self.waits.entry(pid).or_default().push(end - open.start);
        for &(rank, _) in &open.ready {
            self.ranks = self.ranks.max(rank + 1);
        }
        let [.., (_, before), (last, at)] = open.ready[..] else {
            return;
        };
        self.with_ranks += 1;
        let lag = at - before;
        if lag >= CYCLE_US {
            self.held.entry(last).or_default().push(lag);
        }
    }

    /// The report of what was read.
    pub fn report(&self) -> Report {
        let late: u64 = self.held.values().map(|v| v.len() as u64).sum();
        let mut ranks: Vec<RankFigures> = self
            .held
            .iter()
            .map(|(&rank, lags)| {
                let mut lags = lags.clone();
                lags.sort_unstable();
                RankFigures {
                    rank,
                    last: lags.len() as u64,
                    held_median_ms: ms(percentile(&lags, 50)),
                    held_p90_ms: ms(percentile(&lags, 90)),
                }
            })
            .collect();
        ranks.sort_by(|a, b| b.last.cmp(&a.last).then(a.rank.cmp(&b.rank)));
        let mut tensors: Vec<TensorFigures> = self
            .waits
            .iter()
            .map(|(pid, w)| {
                let mut w = w.clone();
                w.sort_unstable();
                TensorFigures {
                    name: self
                        .names
                        .get(pid)
                        .cloned()
                        .unwrap_or_else(|| format!("tensor {pid}")),
                    negotiations: w.len() as u64,
                    wait_median_ms: ms(percentile(&w, 50)),
                    wait_max_ms: ms(w.last().copied().unwrap_or_default()),
                    wait_total_ms: ms(w.iter().sum()),
                }
            })
            .collect();
        tensors.sort_by(|a, b| b.wait_total_ms.total_cmp(&a.wait_total_ms));
        tensors.truncate(TOP_TENSORS);
        let straggler = ranks
            .first()
            .filter(|r| is_straggler(r.last, late, self.with_ranks, self.ranks))
            .map(|r| r.rank);
        Report {
            partial: self.partial,
            ranks_seen: self.ranks,
            negotiations: self.negotiations,
            with_ranks: self.with_ranks,
            late,
            span_s: (self.last_ts - self.first_ts.unwrap_or(self.last_ts)) as f64 / 1e6,
            ranks,
            tensors,
            straggler,
        }
    }
}

/// How many tensors the report lists.
const TOP_TENSORS: usize = 5;

/// A rank is the straggler when it was the late one far more often than its share — in at
/// least half of the negotiations some rank was late in, and at least twice its fair share
/// (`2/N`, at most 90%) — and often: in a fifth of all the negotiations with every rank's
/// time, five at least. (Measured on 3 ranks: one sleeping 50 ms a step was late in 40 of 80;
/// an even run had 6 of 80 late ones, spread over two ranks.)
fn is_straggler(its: u64, late: u64, with_ranks: u64, ranks: u32) -> bool {
    if ranks < 2 || its < 5 || its * 5 < with_ranks {
        return false;
    }
    let share = its as f64 / late as f64;
    share >= 0.5 && share >= (2.0 / ranks as f64).min(0.9)
}

/// The `p`th percentile of sorted `v` (nearest rank); 0 for none.
fn percentile(v: &[i64], p: usize) -> i64 {
    if v.is_empty() {
        return 0;
    }
    let i = (v.len() * p).div_ceil(100).clamp(1, v.len()) - 1;
    v[i]
}

fn ms(us: i64) -> f64 {
    (us as f64 / 1000.0 * 10.0).round() / 10.0
}

/// The sequence of events, each handed to the [`Timeline`] as it is read.
impl<'de> DeserializeSeed<'de> for &mut Timeline {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for &mut Timeline {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON array of trace events")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(e) = seq.next_element::<Event>()? {
            self.event(e);
        }
        Ok(())
    }
}

/// The straggler report (`hvdctl timeline`; `-o json` prints it as is).
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The file was still being written: the report covers what was there.
    pub partial: bool,
    pub ranks_seen: u32,
    pub negotiations: u64,
    /// Negotiations with every rank's ready time.
    pub with_ranks: u64,
    /// Negotiations in which one rank was late by a cycle or more.
    pub late: u64,
    pub span_s: f64,
    /// Per rank, the most often late first.
    pub ranks: Vec<RankFigures>,
    /// The tensors whose negotiations waited longest in all.
    pub tensors: Vec<TensorFigures>,
    pub straggler: Option<u32>,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RankFigures {
    pub rank: u32,
    /// Negotiations this rank was the last to be ready in, a cycle or more after the others.
    pub last: u64,
    /// How long it held the others then (after the next-to-last rank was ready).
    pub held_median_ms: f64,
    pub held_p90_ms: f64,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TensorFigures {
    pub name: String,
    pub negotiations: u64,
    /// How long its negotiations took (the first ready rank's wait).
    pub wait_median_ms: f64,
    pub wait_max_ms: f64,
    pub wait_total_ms: f64,
}

impl Report {
    /// The report for people.
    pub fn text(&self) -> String {
        let mut s = format!(
            "{} negotiations over {:.1} s, ranks 0-{}; {} with every rank's ready time, in {} of them one rank was late by {} ms or more{}\n",
            self.negotiations,
            self.span_s,
            self.ranks_seen.saturating_sub(1),
            self.with_ranks,
            self.late,
            CYCLE_US / 1000,
            if self.partial {
                " (the run is still writing the timeline: what was there so far)"
            } else {
                ""
            }
        );
        if !self.ranks.is_empty() {
            s.push_str("\nRANK  LAST  SHARE  HELD OTHERS (median)  (p90)\n");
            for r in &self.ranks {
                s.push_str(&format!(
                    "{:<5} {:<5} {:>4.0}%  {:>10.1} ms         {:.1} ms\n",
                    r.rank,
                    r.last,
                    100.0 * r.last as f64 / self.late.max(1) as f64,
                    r.held_median_ms,
                    r.held_p90_ms
                ));
            }
        }
        if !self.tensors.is_empty() {
            s.push_str("\nTENSOR (longest negotiations in all)  COUNT  MEDIAN     MAX\n");
            for t in &self.tensors {
                s.push_str(&format!(
                    "{:<37} {:<6} {:>6.1} ms {:>6.1} ms\n",
                    t.name, t.negotiations, t.wait_median_ms, t.wait_max_ms
                ));
            }
        }
        s.push('\n');
        match (self.straggler, self.ranks.first()) {
            (Some(rank), Some(r)) => s.push_str(&format!(
                "Straggler: rank {rank} was the last one ready in {} of {} late negotiations, holding the others {:.1} ms (median)\n",
                r.last, self.late, r.held_median_ms
            )),
            _ if self.with_ranks == 0 => s.push_str(
                "No straggler can be named: no negotiation has every rank's ready time (Horovod's response cache was on?)\n",
            ),
            _ => s.push_str("No straggler: no rank was the late one much more often than the others\n"),
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timeline as Horovod writes it: `steps` allreduces of two tensors across `ranks`
    /// ranks, `late(step, rank)` µs after the others.
    fn trace(ranks: u32, steps: u32, late: impl Fn(u32, u32) -> i64, close: bool) -> String {
        let mut s = String::from(
            "[\n{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {\"start_time_since_epoch_in_micros\":1}},\n",
        );
        for (pid, name) in [(1, "allreduce.grad_w"), (2, "allreduce.grad_b")] {
            s.push_str(&format!("{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {pid}, \"args\": {{\"name\": \"{name}\"}}}},\n"));
        }
        let mut ts = 0i64;
        let mut events = Vec::new();
        for step in 0..steps {
            for pid in [1, 2] {
                events.push(format!("{{\"ph\": \"B\", \"name\": \"NEGOTIATE_ALLREDUCE\", \"ts\": {ts}, \"pid\": {pid}}}"));
                let mut ready: Vec<(i64, u32)> = (0..ranks)
                    .map(|r| (ts + late(step, r) + r as i64, r))
                    .collect();
                ready.sort();
                for (at, r) in &ready {
                    events.push(format!("{{\"ph\": \"X\", \"name\": \"{r}\", \"ts\": {at}, \"pid\": {pid}, \"dur\": 0}}"));
                }
                let end = ready.last().unwrap().0 + 1;
                events.push(format!("{{\"ph\": \"E\", \"ts\": {end}, \"pid\": {pid}}}"));
                events.push(format!(
                    "{{\"ph\": \"B\", \"name\": \"ALLREDUCE\", \"ts\": {}, \"pid\": {pid}}}",
                    end + 5
                ));
                events.push(format!("{{\"ph\": \"E\", \"ts\": {}, \"pid\": {pid}, \"args\": {{\"dtype\": \"float32\", \"shape\": \"[4]\"}}}}", end + 50));
                ts = end + 100;
            }
            events.push(format!(
                "{{\"ph\": \"i\", \"name\": \"CYCLE_START\", \"ts\": {ts}, \"s\": \"g\"}}"
            ));
        }
        s.push_str(&events.join(","));
        if close {
            s.push(']');
        }
        s
    }

    fn report(text: &str) -> Report {
        Timeline::read(text.as_bytes(), "the test's timeline")
            .unwrap()
            .report()
    }

    #[test]
    fn the_rank_that_is_always_late_is_named_with_how_long_it_held_the_others() {
        let r = report(&trace(4, 20, |_, r| if r == 2 { 50_000 } else { 0 }, true));
        assert!(!r.partial);
        assert_eq!((r.ranks_seen, r.negotiations, r.with_ranks), (4, 40, 40));
        assert_eq!(r.straggler, Some(2), "{r:?}");
        assert_eq!(r.ranks[0].last, 40);
        assert!((49.0..51.0).contains(&r.ranks[0].held_median_ms), "{r:?}");
        assert_eq!(r.tensors.len(), 2);
        assert!(r.tensors[0].name.starts_with("allreduce.grad_"));
        assert!(
            r.text()
                .contains("Straggler: rank 2 was the last one ready in 40 of 40")
        );
    }

    #[test]
    fn an_even_run_names_no_one() {
        // Ready within a cycle of each other: nobody was late.
        let even = report(&trace(4, 20, |_, _| 0, true));
        assert_eq!((even.late, even.straggler), (0, None));
        assert!(even.text().contains("No straggler"));
        // Late by turns: each rank a quarter of the time.
        let turns = report(&trace(
            4,
            20,
            |s, r| if s % 4 == r { 20_000 } else { 0 },
            true,
        ));
        assert_eq!(turns.late, 40);
        assert_eq!(turns.straggler, None, "{turns:?}");
    }

    #[test]
    fn a_timeline_still_being_written_is_read_up_to_its_last_whole_event() {
        let whole = trace(3, 10, |_, r| if r == 1 { 5_000 } else { 0 }, false);
        // No closing `]`, then torn in the middle of an event.
        let r = report(&whole);
        assert!(r.partial);
        assert_eq!(r.straggler, Some(1));
        let torn = &whole[..whole.len() - 20];
        let r = report(torn);
        assert!(r.partial);
        assert!(r.text().contains("still writing"));
        // Opened but nothing written yet.
        assert!(Timeline::read(&b""[..], "x").unwrap().partial);
    }

    #[test]
    fn what_is_not_a_timeline_says_so() {
        let e = Timeline::read(&b"{\"a\": 1}"[..], "t.json").err().unwrap();
        assert!(
            e.message.contains("t.json is not a Horovod timeline"),
            "{e}"
        );
        let e = Timeline::read(&b"[]"[..], "t.json").err().unwrap();
        assert!(e.message.contains("no events"), "{e}");
    }

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v: Vec<i64> = (1..=10).collect();
        assert_eq!((percentile(&v, 50), percentile(&v, 90)), (5, 9));
        assert_eq!(percentile(&[7], 90), 7);
        assert_eq!(percentile(&[], 50), 0);
    }
}
