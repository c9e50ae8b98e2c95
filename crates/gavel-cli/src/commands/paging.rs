//! What every list command shares (issue #40): one page at a time, newest
//! first unless `--oldest-first`, `--limit` records per page (the cluster's
//! default is 50, its limit 1000), `--page-token` to continue, and a footer
//! that says how to: `more: --page-token TOKEN` under a table, and
//! `nextPageToken` in `--json` (`null` on the last page). `--all` reads
//! every page instead.

use clap::Args;
use serde_json::Value;

use super::output;
use super::CommandError;

/// The paging flags of a list command.
#[derive(Debug, Clone, Args)]
pub struct PageArgs {
    /// Records per page (default 50, at most 1000; the cluster refuses more
    /// with PAGE_SIZE_INVALID).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Continue where the previous page stopped (its footer prints the
    /// token).
    #[arg(long, value_name = "TOKEN", conflicts_with = "all")]
    pub page_token: Option<String>,
    /// Oldest first instead of newest first.
    #[arg(long)]
    pub oldest_first: bool,
    /// Read every page, not only the first.
    #[arg(long)]
    pub all: bool,
}

impl PageArgs {
    /// The page size to ask for: 0 asks for the cluster's default.
    pub fn limit(&self) -> u32 {
        self.limit.unwrap_or(0)
    }

    /// The first page's token.
    pub fn page_token(&self) -> String {
        self.page_token.clone().unwrap_or_default()
    }
}

/// The `nextPageToken` value of a list's JSON: the token, or `null` on
/// the last page.
pub fn token_json(next_page_token: &str) -> Value {
    if next_page_token.is_empty() {
        Value::Null
    } else {
        Value::String(next_page_token.to_string())
    }
}

/// Prints the line under a table that says how to read the next page;
/// nothing on the last page.
pub fn print_footer(next_page_token: &str) -> Result<(), CommandError> {
    if next_page_token.is_empty() {
        return Ok(());
    }
    output::print(&format!("more: --page-token {next_page_token}\n"))
}
