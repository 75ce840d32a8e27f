//! The `Authorization` header of every request, from the login handlers' credentials: a
//! username and password, a bearer token, or a token re-read from its file (a service
//! account's token rotates); none with a client certificate. The same precedence as kube's
//! (and kubectl's): the username and password, then the token, then its file.

use crate::client::connection_info::ConnectionInfo;
use base64::Engine as _;
use http::HeaderValue;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a token read from its file is used before the file is read again (as kube and
/// client-go do: kubelet rotates a projected token well before it expires).
const TOKEN_FILE_REFRESH: Duration = Duration::from_secs(60);

/// Why a login's credentials cannot authorize requests.
#[derive(Debug, thiserror::Error)]
pub enum AuthorizationError {
    /// The token file cannot be read.
    #[error("cannot read the token from {path}: {source}")]
    TokenFile {
        /// The token file's path.
        path: String,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the {0} cannot be sent in an HTTP header (it has characters that headers cannot carry)"
    )]
    /// A header value cannot be made of it (which part: the token, the username, ...).
    Invalid(&'static str),
}

/// The `Authorization` header of the requests.
pub enum Authorization {
    /// None: a client certificate, or no authentication.
    None,
    /// A token or basic credentials, fixed at the login.
    Fixed(HeaderValue),
    /// A token file that is rotated (a pod's service account): read again now and then.
    TokenFile {
        /// The token file's path.
        path: String,
        /// The header of the last reading, and when it was read.
        read: Mutex<(HeaderValue, Instant)>,
    },
}

impl Authorization {
    /// The header that the login's info asks for.
    pub fn of(info: &ConnectionInfo) -> Result<Self, AuthorizationError> {
        if let (Some(username), Some(password)) = (&info.username, &info.password) {
            let pair = format!("{username}:{password}");
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            return Ok(Self::Fixed(header(
                &format!("Basic {encoded}"),
                "password",
            )?));
        }
        if let Some(token) = &info.token {
            return Ok(Self::Fixed(bearer(token)?));
        }
        if let Some(path) = &info.token_path {
            let now = Instant::now();
            let read = Mutex::new((read_token(path)?, now));
            return Ok(Self::TokenFile {
                path: path.clone(),
                read,
            });
        }
        Ok(Self::None)
    }

    /// The header for a request now. A token file that cannot be read again keeps its
    /// last token (it may still be valid; a refusal brings a new login).
    pub fn header(&self) -> Option<HeaderValue> {
        match self {
            Self::None => None,
            Self::Fixed(value) => Some(value.clone()),
            Self::TokenFile { path, read } => {
                let mut read = read.lock().expect("not poisoned");
                if read.1.elapsed() >= TOKEN_FILE_REFRESH {
                    if let Ok(value) = read_token(path) {
                        read.0 = value;
                    }
                    read.1 = Instant::now();
                }
                Some(read.0.clone())
            }
        }
    }
}

fn read_token(path: &str) -> Result<HeaderValue, AuthorizationError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthorizationError::TokenFile {
        path: path.to_owned(),
        source,
    })?;
    bearer(text.trim())
}

fn bearer(token: &str) -> Result<HeaderValue, AuthorizationError> {
    header(&format!("Bearer {token}"), "token")
}

/// A header value that is never shown in debug output.
fn header(text: &str, what: &'static str) -> Result<HeaderValue, AuthorizationError> {
    let mut value = HeaderValue::from_str(text).map_err(|_| AuthorizationError::Invalid(what))?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(authorization: &Authorization) -> Option<String> {
        (authorization.header()).map(|v| v.to_str().unwrap().to_owned())
    }

    #[test]
    fn a_password_comes_before_a_token_and_a_token_before_its_file() {
        let mut info = ConnectionInfo {
            username: Some("user".into()),
            password: Some("pass".into()),
            token: Some("t0k3n".into()),
            token_path: Some("/nonexistent".into()),
            ..Default::default()
        };
        let basic = Authorization::of(&info).unwrap();
        assert_eq!(shown(&basic).as_deref(), Some("Basic dXNlcjpwYXNz"));
        assert!(basic.header().unwrap().is_sensitive());
        info.password = None;
        let token = Authorization::of(&info).unwrap();
        assert_eq!(shown(&token).as_deref(), Some("Bearer t0k3n"));
        info.token = None;
        let error = Authorization::of(&info).err().unwrap().to_string();
        assert!(error.contains("/nonexistent"), "{error}");
        info.token_path = None;
        assert!(Authorization::of(&info).unwrap().header().is_none());
    }

    #[test]
    fn a_token_file_is_read_again_after_a_minute_and_kept_if_unreadable() {
        let dir = std::env::temp_dir().join(format!("kopf-rs-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let info = ConnectionInfo {
            token_path: Some(path.to_string_lossy().into_owned()),
            ..Default::default()
        };
        let authorization = Authorization::of(&info).unwrap();
        std::fs::write(&path, "second\n").unwrap();
        assert_eq!(shown(&authorization).as_deref(), Some("Bearer first"));
        let Authorization::TokenFile { read, .. } = &authorization else {
            panic!("not a token file");
        };
        let long_ago = Instant::now() - TOKEN_FILE_REFRESH;
        read.lock().unwrap().1 = long_ago;
        assert_eq!(shown(&authorization).as_deref(), Some("Bearer second"));
        std::fs::remove_file(&path).unwrap();
        read.lock().unwrap().1 = long_ago;
        assert_eq!(shown(&authorization).as_deref(), Some("Bearer second"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
