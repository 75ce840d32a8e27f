//! Failures on demand, for tests of a handler's or the engine's error paths: the next
//! requests that match (by method, and by a part of their path and query) are answered
//! with an error status, and optionally a `Retry-After`, instead of being served.

use std::sync::Mutex;

/// Requests to fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// Only requests of this method (`PATCH`, ...); any method if none.
    pub method: Option<String>,
    /// Only requests whose path (with its query) contains this text; all if empty.
    pub path: String,
    /// The status to answer with (409, 429, 500, ...).
    pub status: u16,
    /// The `Retry-After` header to send, in seconds.
    pub retry_after: Option<u64>,
    /// How many requests to fail; without end if none.
    pub times: Option<u64>,
}

/// The failures asked for and not yet used up, matched in the order they were added.
#[derive(Debug, Default)]
pub struct Faults(Mutex<Vec<Fault>>);

impl Faults {
    /// Fail the requests that match, from now on.
    pub fn add(&self, fault: Fault) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(fault);
    }

    /// Fail no more requests.
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// The failure for this request, if one matches (a counted one is used up by it).
    pub fn take(&self, method: &str, path_and_query: &str) -> Option<Fault> {
        let mut faults = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let index = faults.iter().position(|f| {
            (f.method.as_deref()).is_none_or(|m| m.eq_ignore_ascii_case(method))
                && path_and_query.contains(&f.path)
        })?;
        let fault = faults[index].clone();
        match &mut faults[index].times {
            Some(1) => drop(faults.remove(index)),
            Some(times) => *times -= 1,
            None => {}
        }
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(method: Option<&str>, path: &str, times: Option<u64>) -> Fault {
        Fault {
            method: method.map(str::to_owned),
            path: path.into(),
            status: 500,
            retry_after: None,
            times,
        }
    }

    #[test]
    fn a_fault_matches_its_method_and_path_as_many_times_as_asked() {
        let faults = Faults::default();
        faults.add(fault(Some("PATCH"), "/greetings/g1", Some(2)));
        assert_eq!(faults.take("GET", "/apis/x/v1/greetings/g1"), None);
        assert_eq!(faults.take("patch", "/apis/x/v1/greetings/g2"), None);
        assert!(faults
            .take("PATCH", "/apis/x/v1/greetings/g1/status")
            .is_some());
        assert!(faults.take("PATCH", "/apis/x/v1/greetings/g1").is_some());
        assert_eq!(faults.take("PATCH", "/apis/x/v1/greetings/g1"), None);
    }

    #[test]
    fn an_endless_fault_fails_all_until_cleared() {
        let faults = Faults::default();
        faults.add(fault(None, "watch=true", None));
        for _ in 0..3 {
            assert!(faults.take("GET", "/api/v1/pods?watch=true").is_some());
        }
        faults.clear();
        assert_eq!(faults.take("GET", "/api/v1/pods?watch=true"), None);
    }
}
