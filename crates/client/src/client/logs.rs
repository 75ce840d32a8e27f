//! Following one container's log (`GET .../pods/NAME/log?follow=true&timestamps=true`): its
//! lines as they come, each with the time its container runtime gave it. A stream that
//! breaks is opened again from the latest second read (`sinceTime`: the kubelet gives the
//! lines of that second and later, in the log's order), and as many lines as were read of
//! that second are skipped. When the times go backwards (the node's clock stepped back), a
//! stream from that second would give old lines again and drop the new, earlier-timed ones:
//! then it is opened from where the first one was, and the lines read since are skipped by
//! their count. No line is lost, none is delivered twice.

use crate::client::credentials::Credentials;
use crate::client::watching::urlencode;
use chrono::{DateTime, SecondsFormat, Utc};
use futures::io::{AsyncBufRead, AsyncBufReadExt};
use std::pin::Pin;

/// Longer lines are cut to this (the rest of the line is read and dropped): a container that
/// writes without newlines must not grow the operator's memory without end.
pub const MAX_LINE: usize = 256 << 10;

/// A line of a container's log, without its newline.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    /// When the container runtime took the line.
    pub time: DateTime<Utc>,
    /// The line's bytes, as written.
    pub text: Vec<u8>,
    /// Cut to `MAX_LINE` bytes.
    pub cut: bool,
}

/// How far a container's log has been read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Position {
    /// Where the first stream started (`sinceTime`; none: the log's start).
    origin: Option<DateTime<Utc>>,
    /// How many lines read a stream from `origin` gives again.
    from_origin: u64,
    /// The latest second read, and how many lines of it were read.
    latest: Option<(i64, u32)>,
    /// The last line read is older than `latest`'s second: the clock stepped back.
    behind: bool,
    /// Lines before this time are not wanted (a log followed from a time).
    not_before: Option<DateTime<Utc>>,
}

impl Position {
    /// Nothing before this time: the lines of a log from then on.
    pub fn since(time: DateTime<Utc>) -> Self {
        Self {
            origin: DateTime::from_timestamp(time.timestamp(), 0),
            not_before: Some(time),
            ..Self::default()
        }
    }

    /// Where a new stream starts for this position: `sinceTime`, to the second.
    pub fn since_time(&self) -> Option<String> {
        let start = match (self.latest, self.behind) {
            (Some((second, _)), false) => DateTime::from_timestamp(second, 0),
            _ => self.origin,
        };
        start.map(|time| time.to_rfc3339_opts(SecondsFormat::Secs, true))
    }

    /// A line of this time was read: it is now the last one.
    pub fn read(&mut self, time: DateTime<Utc>) {
        if self.origin.is_none_or(|origin| time >= origin) {
            self.from_origin += 1;
        }
        let second = time.timestamp();
        match self.latest {
            Some((latest, count)) if second == latest => {
                self.latest = Some((latest, count + 1));
                self.behind = false;
            }
            Some((latest, _)) if second < latest => self.behind = true,
            _ => {
                self.latest = Some((second, 1));
                self.behind = false;
            }
        }
    }

    /// What a new stream from this position gives again, to be skipped.
    fn replay(&self) -> Replay {
        let skip = match (self.latest, self.behind) {
            (Some((_, count)), false) => u64::from(count),
            _ => self.from_origin,
        };
        Replay {
            skip,
            not_before: self.not_before,
        }
    }
}

/// The first lines of a new stream: those read before (by their count), and those not wanted.
#[derive(Debug, Clone, Copy)]
struct Replay {
    skip: u64,
    not_before: Option<DateTime<Utc>>,
}

impl Replay {
    fn repeats(&mut self, time: DateTime<Utc>) -> bool {
        if self.not_before.is_some_and(|not_before| time < not_before) {
            return true;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return true;
        }
        false
    }
}

/// A line as the API server sends it with `timestamps=true`: the time (RFC 3339, in
/// nanoseconds), a space, the text. None for a line without a time.
pub fn parse_line(line: &[u8]) -> Option<(DateTime<Utc>, &[u8])> {
    let space = line.iter().position(|&b| b == b' ')?;
    let time = std::str::from_utf8(&line[..space]).ok()?;
    let time = DateTime::parse_from_rfc3339(time).ok()?.with_timezone(&Utc);
    Some((time, &line[space + 1..]))
}

/// The URL of a container's log, followed, with the lines' times.
pub fn log_url(namespace: &str, pod: &str, container: &str, position: &Position) -> String {
    let mut url = format!(
        "/api/v1/namespaces/{}/pods/{}/log?follow=true&timestamps=true&container={}",
        urlencode(namespace),
        urlencode(pod),
        urlencode(container)
    );
    if let Some(since) = position.since_time() {
        url.push_str(&format!("&sinceTime={}", urlencode(&since)));
    }
    url
}

/// One container's log, followed across streams (`next()` opens them as needed).
pub struct LogFollower {
    namespace: String,
    pod: String,
    container: String,
    position: Position,
    stream: Option<Stream>,
}

struct Stream {
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    replay: Replay,
    /// The line being read: kept here, so that a `next()` dropped mid-line (e.g. in a
    /// `select!`) loses nothing, and the next call reads on.
    partial: Partial,
}

/// A line read so far, and whether it is cut already.
#[derive(Default)]
struct Partial {
    line: Vec<u8>,
    cut: bool,
}

impl LogFollower {
    /// A container's log, to follow from this position.
    pub fn new(namespace: &str, pod: &str, container: &str, position: Position) -> Self {
        Self {
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            container: container.to_owned(),
            position,
            stream: None,
        }
    }

    /// Where it has got to: the next line is the one after this.
    pub fn position(&self) -> &Position {
        &self.position
    }

    /// The next new line; `Ok(None)` when the stream has ended (the container has ended,
    /// the server closed the stream, or it was silent for the request timeout: the caller
    /// decides whether to follow on, and the next call opens a new stream from the position).
    /// Cancel-safe: a line half-read when the call is dropped is read on by the next call.
    pub async fn next(
        &mut self,
        credentials: &Credentials,
    ) -> Result<Option<LogLine>, kube::Error> {
        loop {
            if self.stream.is_none() {
                let url = log_url(&self.namespace, &self.pod, &self.container, &self.position);
                let body = credentials.get_stream(&url).await?;
                self.stream = Some(Stream {
                    body: Box::pin(body),
                    replay: self.position.replay(),
                    partial: Partial::default(),
                });
            }
            let stream = self.stream.as_mut().expect("opened above");
            let reading = read_line(stream.body.as_mut(), &mut stream.partial);
            // A stream silent for `settings.networking.request_timeout` is opened again (a
            // connection may die without a word): no line is lost by it, and quiet logs are
            // normal, so it is no error.
            let read = match credentials.read_timeout() {
                Some(limit) => match tokio::time::timeout(limit, reading).await {
                    Ok(read) => read?,
                    Err(_) => {
                        self.stream = None;
                        return Ok(None);
                    }
                },
                None => reading.await?,
            };
            let Some((mut raw, cut)) = read else {
                self.stream = None;
                return Ok(None);
            };
            let Some((time, text)) = parse_line(&raw) else {
                continue; // not a line of the log (the server's own words are never timed)
            };
            if stream.replay.repeats(time) {
                continue;
            }
            self.position.read(time);
            raw.drain(..raw.len() - text.len()); // the text stays where it was read, not copied
            return Ok(Some(LogLine {
                time,
                text: raw,
                cut,
            }));
        }
    }
}

/// The next whole line (without its newline), cut to `MAX_LINE` (then true); `None` at the
/// end: a last line without its newline is incomplete (the stream broke in it) and is read
/// again by the next stream. Cancel-safe: what is read of a line waits in `partial`.
async fn read_line(
    mut body: Pin<&mut (dyn AsyncBufRead + Send)>,
    partial: &mut Partial,
) -> Result<Option<(Vec<u8>, bool)>, kube::Error> {
    loop {
        let (taken, complete) = {
            let chunk = body.fill_buf().await.map_err(kube::Error::ReadEvents)?;
            if chunk.is_empty() {
                return Ok(None);
            }
            let (taken, complete) = match chunk.iter().position(|&b| b == b'\n') {
                Some(at) => (at + 1, true),
                None => (chunk.len(), false),
            };
            let text = &chunk[..if complete { taken - 1 } else { taken }];
            let room = MAX_LINE.saturating_sub(partial.line.len());
            partial.cut |= text.len() > room;
            (partial.line).extend_from_slice(&text[..text.len().min(room)]);
            (taken, complete)
        };
        body.consume_unpin(taken);
        if complete {
            let line = std::mem::take(&mut partial.line);
            return Ok(Some((line, std::mem::take(&mut partial.cut))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_line_has_its_time_and_text() {
        let (at, text) =
            parse_line(b"2026-01-02T03:04:05.678901234Z model accuracy is 97%").unwrap();
        assert_eq!(at, time("2026-01-02T03:04:05.678901234Z"));
        assert_eq!(text, b"model accuracy is 97%");
        assert_eq!(parse_line(b"2026-01-02T03:04:05Z ").unwrap().1, b"");
        assert!(parse_line(b"no time here").is_none());
    }

    #[test]
    fn a_stream_resumes_from_the_last_lines_second() {
        let mut position = Position::default();
        assert_eq!(position.since_time(), None);
        position.read(time("2026-01-02T03:04:05.678901234Z"));
        assert_eq!(
            position.since_time().as_deref(),
            Some("2026-01-02T03:04:05Z")
        );
        let url = log_url("ns", "p", "main", &position);
        assert_eq!(url, "/api/v1/namespaces/ns/pods/p/log?follow=true&timestamps=true&container=main&sinceTime=2026-01-02T03%3A04%3A05Z");
    }

    /// What a stream from `since` gives of a whole log: the kubelet drops the lines before it.
    fn served(log: &[DateTime<Utc>], since: Option<&str>) -> Vec<DateTime<Utc>> {
        let since = since.map(time);
        (log.iter().copied())
            .filter(|at| since.is_none_or(|since| *at >= since))
            .collect()
    }

    /// The lines a follower delivers of a log whose stream breaks after each `breaks[i]` lines.
    fn followed(
        log: &[DateTime<Utc>],
        mut position: Position,
        breaks: &[usize],
    ) -> Vec<DateTime<Utc>> {
        let mut delivered = Vec::new();
        for &limit in breaks.iter().chain([&usize::MAX]) {
            let mut replay = position.replay();
            // (the stream breaks after `limit` lines)
            for at in served(log, position.since_time().as_deref())
                .into_iter()
                .take(limit)
            {
                if !replay.repeats(at) {
                    position.read(at);
                    delivered.push(at);
                }
            }
        }
        delivered
    }

    #[test]
    fn what_a_resumed_stream_repeats_is_skipped() {
        // Read before the break: a line at .1, two at .5 (the same time), one more at .5 unread.
        let mut position = Position::default();
        for at in ["05.1", "05.5", "05.5"] {
            position.read(time(&format!("2026-01-02T03:04:{at}Z")));
        }
        let mut replay = position.replay();
        let repeated: Vec<bool> = ["05.1", "05.5", "05.5", "05.5", "05.7", "05.5"]
            .iter()
            .map(|at| replay.repeats(time(&format!("2026-01-02T03:04:{at}Z"))))
            .collect();
        // The third line of .5 is new, so is all after it (even an out-of-order time).
        assert_eq!(repeated, [true, true, true, false, false, false]);
        // A log followed from a time: the lines before it are not new, those of it are.
        let mut replay = Position::since(time("2026-01-02T03:04:05.5Z")).replay();
        assert!(replay.repeats(time("2026-01-02T03:04:05.1Z")));
        assert!(!replay.repeats(time("2026-01-02T03:04:05.5Z")));
        // A first stream repeats nothing.
        assert!(!Position::default()
            .replay()
            .repeats(time("2026-01-02T03:04:05Z")));
    }

    #[test]
    fn a_log_whose_times_go_back_is_resumed_exactly() {
        // The node's clock steps back after 12.0: then catches up again.
        let log: Vec<DateTime<Utc>> = [
            "10.2", "10.5", "12.0", "08.0", "09.0", "09.5", "12.3", "13.0",
        ]
        .iter()
        .map(|at| time(&format!("2026-01-02T03:04:{at}Z")))
        .collect();
        for first in 0..=log.len() {
            for second in 0..=log.len() {
                for start in [
                    Position::default(),
                    Position::since(time("2026-01-02T03:04:10.3Z")),
                ] {
                    let wanted: Vec<_> = match start.not_before {
                        None => log.clone(),
                        Some(not_before) => {
                            log.iter().copied().filter(|at| *at >= not_before).collect()
                        }
                    };
                    let from_the_start = start.not_before.is_none();
                    let delivered = followed(&log, start, &[first, second]);
                    let mut unique = delivered.clone();
                    unique.sort();
                    unique.dedup(); // (the log's times are all different)
                    assert_eq!(
                        unique.len(),
                        delivered.len(),
                        "a line twice: breaks after {first}, {second}"
                    );
                    assert!(delivered.iter().all(|at| wanted.contains(at)));
                    // Exact unless a stream breaks before the step back is seen: the kubelet
                    // then drops the earlier-timed lines that follow (a limit of `sinceTime`).
                    let seen = |taken: usize| taken == 0 || taken >= 4;
                    if !from_the_start || seen(first) && seen(second) {
                        assert_eq!(delivered, wanted, "breaks after {first} and {second} lines");
                    }
                }
            }
        }
        // Behind the latest second, a stream starts where the first one did.
        let mut position = Position::default();
        for at in &log[..5] {
            position.read(*at);
        }
        assert_eq!(position.since_time(), None);
        position.read(log[6]);
        assert_eq!(
            position.since_time().as_deref(),
            Some("2026-01-02T03:04:12Z")
        );
    }

    #[tokio::test]
    async fn a_read_dropped_mid_line_loses_nothing() {
        use futures::TryStreamExt;
        let (chunks, stream) = futures::channel::mpsc::unbounded::<std::io::Result<Vec<u8>>>();
        let mut body: Pin<Box<dyn AsyncBufRead + Send>> = Box::pin(stream.into_async_read());
        let mut partial = Partial::default();
        chunks.unbounded_send(Ok(b"par".to_vec())).unwrap();
        let waited = std::time::Duration::from_millis(50);
        let reading = read_line(body.as_mut(), &mut partial);
        assert!(tokio::time::timeout(waited, reading).await.is_err()); // dropped mid-line
        chunks.unbounded_send(Ok(b"tial\nnext\n".to_vec())).unwrap();
        let line = read_line(body.as_mut(), &mut partial).await.unwrap();
        assert_eq!(line, Some((b"partial".to_vec(), false)));
        let line = read_line(body.as_mut(), &mut partial).await.unwrap();
        assert_eq!(line, Some((b"next".to_vec(), false)));
    }

    #[tokio::test]
    async fn lines_are_whole_and_cut_when_too_long() {
        let long = "x".repeat(MAX_LINE + 10);
        let text = format!("a\nb\n{long}\npartial");
        let mut body: Pin<Box<dyn AsyncBufRead + Send>> =
            Box::pin(futures::io::BufReader::with_capacity(7, text.as_bytes()));
        let mut lines = Vec::new();
        let mut partial = Partial::default();
        while let Some(line) = read_line(body.as_mut(), &mut partial).await.unwrap() {
            lines.push(line);
        }
        assert_eq!(lines.len(), 3); // the partial last line is not a line
        assert_eq!(lines[0], (b"a".to_vec(), false));
        assert_eq!(lines[1], (b"b".to_vec(), false));
        assert_eq!(lines[2].0.len(), MAX_LINE);
        assert!(lines[2].1);
    }
}
