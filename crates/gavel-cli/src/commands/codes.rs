//! `gavel codes`: every stable code of the one catalogue (gavel-core's
//! `ErrorCode`, docs/decisions.md, "One error catalogue") with its gRPC
//! class and when it happens. It reads no cluster and no file.

use clap::Args;
use gavel_core::ErrorCode;
use serde_json::json;

use super::output::{self, Table};
use super::CommandError;

/// `gavel codes`.
#[derive(Debug, Args)]
pub struct CodesArgs {
    /// Print JSON (`{"codes": [{"class", "code", "description"}, ...]}`) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Prints the catalogue, in its order.
pub fn run(args: CodesArgs) -> Result<(), CommandError> {
    if args.json {
        let codes: Vec<serde_json::Value> = ErrorCode::ALL
            .iter()
            .map(|code| {
                json!({"class": code.class().as_str(), "code": code.as_str(), "description": code.description()})
            })
            .collect();
        return output::print_json(&json!({ "codes": codes }));
    }
    let mut table = Table::new(&["CODE", "CLASS", "DESCRIPTION"]);
    for code in ErrorCode::ALL {
        table.row(vec![code.as_str().to_string(), code.class().as_str().to_string(), code.description().to_string()]);
    }
    output::print(&table.render())
}
