//! A client for a console router in-process: requests through `oneshot`, answers as text.

use std::net::SocketAddr;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{header, HeaderMap, Method, Request, StatusCode};
use axum::Router;
use tower::ServiceExt;

/// One answer of the router.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    /// The `Location` of a redirect.
    #[track_caller]
    pub fn location(&self) -> &str {
        assert_eq!(self.status, StatusCode::SEE_OTHER, "{}", self.body);
        self.headers[header::LOCATION].to_str().unwrap()
    }

    /// Asserts that the answer has `status` and contains each of `parts`.
    #[track_caller]
    pub fn shows(&self, status: StatusCode, parts: &[&str]) -> &Self {
        assert_eq!(self.status, status, "{}", self.body);
        for part in parts {
            assert!(self.body.contains(part), "{part:?} not in {}", self.body);
        }
        self
    }

    /// Asserts that the answer contains none of `parts`.
    #[track_caller]
    pub fn lacks(&self, parts: &[&str]) -> &Self {
        for part in parts {
            assert!(!self.body.contains(part), "{part:?} in {}", self.body);
        }
        self
    }

    /// The CSRF token of the page's forms.
    #[track_caller]
    pub fn csrf(&self) -> String {
        let (_, after) = self
            .body
            .split_once(r#"name="csrf" value=""#)
            .expect("a form with a CSRF token");
        after.split('"').next().unwrap().to_owned()
    }
}

/// Requests to a router, addressed to `host`, with an optional `Authorization` header, and
/// optionally the peer a server would record (`ConnectInfo`) and extra headers.
pub struct Client {
    pub router: Router,
    pub host: &'static str,
    pub authorization: Option<String>,
    pub peer: Option<SocketAddr>,
    pub headers: Vec<(&'static str, &'static str)>,
}

impl Client {
    pub fn new(router: Router) -> Client {
        Client {
            router,
            host: "127.0.0.1:8080",
            authorization: None,
            peer: None,
            headers: Vec::new(),
        }
    }

    pub async fn get(&self, uri: &str) -> Answer {
        self.send(Method::GET, uri, None).await
    }

    /// A form POST of `fields`, url-encoded.
    pub async fn post(&self, uri: &str, fields: &[(&str, &str)]) -> Answer {
        let body = fields
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        self.send(Method::POST, uri, Some(body)).await
    }

    async fn send(&self, method: Method, uri: &str, form: Option<String>) -> Answer {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, self.host);
        if let Some(auth) = &self.authorization {
            request = request.header(header::AUTHORIZATION, auth);
        }
        for (name, value) in &self.headers {
            request = request.header(*name, *value);
        }
        if let Some(peer) = self.peer {
            request = request.extension(ConnectInfo(peer));
        }
        let request = match form {
            Some(form) => request
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(Body::from(form)),
            None => request.body(Body::empty()),
        };
        let response = self.router.clone().oneshot(request.unwrap()).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Answer {
            status,
            headers,
            body: String::from_utf8(bytes.to_vec()).expect("UTF-8 page"),
        }
    }
}

/// Percent-encodes every byte but ASCII letters and digits (valid in a query and a form).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
