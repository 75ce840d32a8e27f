//! Error texts with their causes: kube's errors say "client error (Connect)" on
//! top and "Connection refused" only in their sources.

use std::error::Error;

/// The error and all its sources, joined with ": " (repeated texts are skipped).
/// The API's refusals read as "HTTP 403 Forbidden: message", not as a debug dump.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    if let Some(kube::Error::Api(status)) = error.downcast_ref::<kube::Error>() {
        let reason = if status.reason.is_empty() {
            String::new()
        } else {
            format!(" {}", status.reason)
        };
        return format!("HTTP {}{reason}: {}", status.code, status.message);
    }
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

    #[test]
    fn api_refusals_are_short() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden", "message": "no way"
        }))
        .unwrap();
        let error = kube::Error::Api(Box::new(status));
        assert_eq!(super::chain(&error), "HTTP 403 Forbidden: no way");
    }
}
