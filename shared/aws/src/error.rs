//! SDK errors → [`PortError`].

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use flotilla_ports::PortError;

/// How a failed call is reported to the services.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    ConditionFailed,
    Throttled,
    Unavailable,
    Rejected,
}

/// Error codes that mean "slow down".
const THROTTLE_CODES: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "RequestLimitExceeded",
    "TransactionConflictException",
    "TransactionInProgressException",
    "LimitExceededException",
    "SlowDown",
    "BandwidthLimitExceeded",
    "PriorRequestNotComplete",
];

/// Error codes of transient server-side failures.
const UNAVAILABLE_CODES: &[&str] = &[
    "Unavailable",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "InternalError",
    "InternalFailure",
    "InternalServerError",
    "InternalServerErrorException",
    "RequestTimeout",
    "RequestTimeoutException",
    "RequestExpired",
];

impl ErrorKind {
    /// Classifies a service error by its code and HTTP status.
    pub fn of(code: Option<&str>, status: Option<u16>) -> ErrorKind {
        let code = code.unwrap_or("");
        if code == "ConditionalCheckFailedException" || code == "ConditionalCheckFailed" {
            ErrorKind::ConditionFailed
        } else if THROTTLE_CODES.contains(&code) || status == Some(429) {
            ErrorKind::Throttled
        } else if UNAVAILABLE_CODES.contains(&code) || status.is_some_and(|s| s >= 500) {
            ErrorKind::Unavailable
        } else {
            ErrorKind::Rejected
        }
    }

    /// The cancellation reasons of a DynamoDB TransactionCanceledException:
    /// a failed condition wins, then throttling / conflicts, then transient
    /// failures; anything else (validation) rejects.
    pub fn of_cancellation<'a>(reasons: impl IntoIterator<Item = &'a str>) -> ErrorKind {
        let kinds: Vec<ErrorKind> = reasons
            .into_iter()
            .filter(|r| !r.is_empty() && *r != "None")
            .map(|r| match r {
                "ConditionalCheckFailed" => ErrorKind::ConditionFailed,
                "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded" => {
                    ErrorKind::Throttled
                }
                other => ErrorKind::of(Some(other), None),
            })
            .collect();
        [
            ErrorKind::ConditionFailed,
            ErrorKind::Throttled,
            ErrorKind::Unavailable,
            ErrorKind::Rejected,
        ]
        .into_iter()
        .find(|k| kinds.contains(k))
        // No reason given: a conflict with another transaction.
        .unwrap_or(ErrorKind::Throttled)
    }

    pub fn into_error(self, message: String) -> PortError {
        match self {
            ErrorKind::ConditionFailed => PortError::ConditionFailed(message),
            ErrorKind::Throttled => PortError::Throttled(message),
            ErrorKind::Unavailable => PortError::Unavailable(message),
            ErrorKind::Rejected => PortError::Rejected(message),
        }
    }
}

/// The error code of a service error (`None` for transport failures).
pub(crate) fn code<E: ProvideErrorMetadata>(err: &SdkError<E, HttpResponse>) -> Option<&str> {
    match err {
        SdkError::ServiceError(ctx) => ctx.err().code(),
        _ => None,
    }
}

/// Maps an SDK error onto a [`PortError`]; `what` names the operation and
/// the key or resource (`DynamoDB PutItem pk / sk`).
pub fn classify<E>(what: &str, err: &SdkError<E, HttpResponse>) -> PortError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let (kind, detail) = match err {
        SdkError::ServiceError(ctx) => {
            let e = ctx.err();
            let status = ctx.raw().status().as_u16();
            (
                ErrorKind::of(e.code(), Some(status)),
                format!(
                    "{} (HTTP {status}): {}",
                    e.code().unwrap_or("unknown error"),
                    e.message().unwrap_or("no message")
                ),
            )
        }
        SdkError::ConstructionFailure(_) => (ErrorKind::Rejected, error_chain(err)),
        // Timeouts, connection failures, unreadable responses: the call may
        // or may not have happened.
        _ => (ErrorKind::Unavailable, error_chain(err)),
    };
    kind.into_error(format!("{what}: {detail}"))
}

/// `err: source: source...` (the SDK's top-level messages are terse).
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut s = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        s.push_str(": ");
        s.push_str(&e.to_string());
        cur = e.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_statuses() {
        use ErrorKind::*;
        let cases: &[(Option<&str>, Option<u16>, ErrorKind)] = &[
            (
                Some("ConditionalCheckFailedException"),
                Some(400),
                ConditionFailed,
            ),
            (
                Some("ProvisionedThroughputExceededException"),
                Some(400),
                Throttled,
            ),
            (Some("ThrottlingException"), Some(400), Throttled),
            (Some("RequestLimitExceeded"), Some(503), Throttled),
            (Some("TransactionConflictException"), Some(400), Throttled),
            (Some("Unavailable"), Some(503), Unavailable),
            (Some("InternalError"), Some(500), Unavailable),
            (Some("Whatever"), Some(502), Unavailable),
            (None, Some(504), Unavailable),
            (None, Some(429), Throttled),
            (Some("ValidationException"), Some(400), Rejected),
            (Some("ResourceNotFoundException"), Some(400), Rejected),
            (Some("InvalidParameterValue"), Some(400), Rejected),
            (Some("UnauthorizedOperation"), Some(403), Rejected),
        ];
        for (code, status, want) in cases {
            assert_eq!(ErrorKind::of(*code, *status), *want, "{code:?} {status:?}");
        }
    }

    #[test]
    fn transaction_cancellation_reasons() {
        use ErrorKind::*;
        assert_eq!(
            ErrorKind::of_cancellation(["None", "ConditionalCheckFailed", "TransactionConflict"]),
            ConditionFailed
        );
        assert_eq!(
            ErrorKind::of_cancellation(["None", "TransactionConflict"]),
            Throttled
        );
        assert_eq!(
            ErrorKind::of_cancellation(["ValidationError", "None"]),
            Rejected
        );
        assert_eq!(ErrorKind::of_cancellation(["ThrottlingError"]), Throttled);
        assert_eq!(ErrorKind::of_cancellation([]), Throttled);
    }

    #[test]
    fn errors_keep_the_message() {
        let e = ErrorKind::Rejected.into_error("DynamoDB PutItem a / b: boom".into());
        assert_eq!(e.to_string(), "rejected: DynamoDB PutItem a / b: boom");
        assert!(!e.is_retryable());
        assert!(ErrorKind::Throttled
            .into_error(String::new())
            .is_retryable());
    }
}
