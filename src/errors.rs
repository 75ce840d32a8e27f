//! Error texts with their causes: kube's errors say "client error (Connect)" on
//! top and "Connection refused" only in their sources.

use std::error::Error;

/// The error and all its sources, joined with ": " (repeated texts are skipped).
pub fn chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[test]
    fn chains_sources() {
        let inner =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let outer =
            std::io::Error::other(Box::new(inner) as Box<dyn std::error::Error + Send + Sync>);
        assert_eq!(super::chain(&outer), "Connection refused");
    }
}
