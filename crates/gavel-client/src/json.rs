//! The JSON check the SDK runs before sending a caller's JSON: the cluster's
//! own (`gavel-json`), so a text the cluster would refuse (not JSON, or not
//! I-JSON: a number a double cannot hold exactly, a duplicated key, a lone
//! surrogate) is refused here with the same domain code and message, naming
//! the JSON Pointer, and costs no round trip. Sizes are left to the cluster.

use gavel_proto::v1 as pb;

use crate::error::Error;

/// The domain code the cluster refuses an input of `Submit` and `Resume` with (SPEC §4).
const INPUT_INVALID: &str = "INPUT_INVALID";
/// The domain code it refuses the other JSON fields with.
const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";

/// A request that may carry JSON text from the caller.
pub(crate) trait CarriesJson {
    /// The JSON text, the name the cluster gives the field in a refusal,
    /// and the domain code it refuses it with; `None` when there is none.
    fn json(&self) -> Option<(&str, &'static str, &'static str)>;
}

/// Refuses the request's JSON as the cluster would, before it is sent.
pub(crate) fn check(request: &impl CarriesJson) -> Result<(), Error> {
    match request.json() {
        Some((text, field, code)) => check_text(text, field, code),
        None => Ok(()),
    }
}

/// Refuses a worker's output as the cluster would refuse it in a report.
pub(crate) fn check_output(output_json: &str) -> Result<(), Error> {
    check_text(output_json, OUTPUT, INVALID_ARGUMENT)
}

/// The name the cluster gives a reported output in a refusal.
const OUTPUT: &str = "output";

fn check_text(text: &str, field: &str, code: &str) -> Result<(), Error> {
    gavel_json::canonicalize(text).map(drop).map_err(|error| Error::Domain {
        code: code.to_string(),
        message: gavel_json::refusal(field, &error),
        problems: Vec::new(),
        status: tonic::Code::InvalidArgument,
        approval: None,
    })
}

impl CarriesJson for pb::SubmitRequest {
    fn json(&self) -> Option<(&str, &'static str, &'static str)> {
        Some((&self.input_json, "input", INPUT_INVALID))
    }
}

impl CarriesJson for pb::ResumeRequest {
    fn json(&self) -> Option<(&str, &'static str, &'static str)> {
        self.input_json.as_deref().map(|text| (text, "input", INPUT_INVALID))
    }
}

impl CarriesJson for pb::CreateApprovalRequest {
    fn json(&self) -> Option<(&str, &'static str, &'static str)> {
        Some((&self.input_json, "input", INVALID_ARGUMENT))
    }
}

impl CarriesJson for pb::ReportRequest {
    fn json(&self) -> Option<(&str, &'static str, &'static str)> {
        match &self.outcome {
            Some(pb::report_request::Outcome::Completed(completed)) => {
                Some((&completed.output_json, OUTPUT, INVALID_ARGUMENT))
            }
            _ => None,
        }
    }
}

impl CarriesJson for pb::RecordEventRequest {
    fn json(&self) -> Option<(&str, &'static str, &'static str)> {
        self.payload_json.as_deref().map(|text| (text, "payload", INVALID_ARGUMENT))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit(input_json: &str) -> pb::SubmitRequest {
        pb::SubmitRequest { input_json: input_json.to_string(), ..pb::SubmitRequest::default() }
    }

    #[test]
    fn a_number_a_double_cannot_hold_is_refused_with_the_clusters_code_and_message() {
        let error = check(&submit(r#"{"order":{"lines":[{},{"qty":9007199254740993}]}}"#)).expect_err("refused");
        assert_eq!(error.code(), "INPUT_INVALID");
        assert_eq!(
            error.to_string(),
            "INPUT_INVALID: input is not I-JSON (RFC 7493): number 9007199254740993 at /order/lines/1/qty \
             cannot be held exactly by a double: it would become 9007199254740992"
        );
        assert!(check(&submit(r#"{"qty":9007199254740991}"#)).is_ok());
    }

    #[test]
    fn every_json_field_is_checked_under_its_own_name_and_code() {
        let bad = r#"{"a":1,"a":2}"#.to_string();
        let output = pb::ReportRequest {
            outcome: Some(pb::report_request::Outcome::Completed(pb::ReportCompleted { output_json: bad.clone() })),
            ..pb::ReportRequest::default()
        };
        let cases: [(Result<(), Error>, &str, &str); 4] = [
            (
                check(&pb::ResumeRequest { input_json: Some(bad.clone()), ..pb::ResumeRequest::default() }),
                "INPUT_INVALID",
                "input",
            ),
            (
                check(&pb::CreateApprovalRequest { input_json: bad.clone(), ..pb::CreateApprovalRequest::default() }),
                "INVALID_ARGUMENT",
                "input",
            ),
            (check(&output), "INVALID_ARGUMENT", "output"),
            (
                check(&pb::RecordEventRequest { payload_json: Some(bad.clone()), ..pb::RecordEventRequest::default() }),
                "INVALID_ARGUMENT",
                "payload",
            ),
        ];
        for (result, code, field) in cases {
            let error = result.expect_err("refused");
            assert_eq!(error.code(), code, "{error}");
            assert!(
                error.to_string().contains(&format!("{field} is not I-JSON (RFC 7493): duplicate key at /a")),
                "{error}"
            );
        }
        // Absent JSON, and a failed report (which carries none), pass.
        assert!(check(&pb::ResumeRequest::default()).is_ok());
        assert!(check(&pb::RecordEventRequest::default()).is_ok());
        assert!(check(&pb::ReportRequest::default()).is_ok());
    }
}
