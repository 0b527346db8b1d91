//! Fetches a Prometheus `/metrics` page; parsing and deltas are `crate::metrics` (pure).

use std::time::Duration;

use crate::metrics::{parse, Snapshot};
use ctxbench_schema::error::ClientError;

use crate::http::Http;

/// Where metrics are scraped from.
#[derive(Debug, Clone)]
pub struct Scraper {
    http: Http,
    path: String,
}

impl Scraper {
    /// Scrapes `path` (e.g. `/metrics`) on `http`'s server.
    pub fn new(http: Http, path: impl Into<String>) -> Self {
        Scraper {
            http,
            path: path.into(),
        }
    }

    /// The URL scraped (for messages).
    pub fn url(&self) -> String {
        format!("{}{}", self.http.base(), self.path)
    }

    /// Fetches and parses one snapshot.
    pub async fn scrape(&self) -> Result<Snapshot, ClientError> {
        let text = self
            .http
            .get_text(&self.path, Duration::from_secs(10))
            .await?;
        parse(&text).map_err(|detail| ClientError::Malformed {
            endpoint: self.path.clone(),
            detail,
        })
    }
}
