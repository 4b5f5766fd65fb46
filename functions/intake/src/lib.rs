//! The intake handler: a Lambda Function URL request in, a response out.
//!
//! | method | path | what |
//! |--------|------|------|
//! | `POST` | `/batches` (or `/`) | accept a batch (JSON body, optionally `Content-Encoding: gzip`) → 202 |
//! | `POST` | `/changes` | accept the cluster's changes or a resync part (`flotilla_service::changes`) → 202; 409 `{"error", "resyncRequired": true}` when the agent must resync |
//! | `GET`  | `/clusters/<id>` | NodeClaims, pending actions and the last result → 200 |
//! | `POST` | `/clusters/<id>/actions` | the agent acknowledges actions (`{"acks": [{"id", "outcome", "message"}]}`, optionally gzip) → 200 |
//!
//! Errors are JSON `{"error": "..."}`: 400 for bad input (the message names
//! the field and object), 403 when the caller may not act for the cluster,
//! 404/405 for unknown routes, 413 for oversized bodies, 503 (with
//! `Retry-After`) when a dependency is throttling or unavailable.

use std::io::Read;

use aws_lambda_events::event::lambda_function_urls::{
    LambdaFunctionUrlRequest, LambdaFunctionUrlResponse,
};
use base64::Engine;
use flotilla_lambda::metrics::{self as m, Metrics, Stage};
use flotilla_ports::{Bus, Clock, Ec2, Store};
use flotilla_service::intake::{self, Caller};
use flotilla_service::{Ports, ServiceError};

fn response(status: i64, body: &serde_json::Value) -> LambdaFunctionUrlResponse {
    let mut r = LambdaFunctionUrlResponse::default();
    r.status_code = status;
    r.headers.insert(
        "content-type",
        aws_lambda_events::http::HeaderValue::from_static("application/json"),
    );
    if status == 503 {
        r.headers.insert(
            "retry-after",
            aws_lambda_events::http::HeaderValue::from_static("2"),
        );
    }
    r.body = Some(body.to_string());
    r
}

fn error(status: i64, message: impl std::fmt::Display) -> LambdaFunctionUrlResponse {
    response(status, &serde_json::json!({ "error": message.to_string() }))
}

fn service_error(e: &ServiceError) -> LambdaFunctionUrlResponse {
    match e {
        ServiceError::BadRequest(m) => error(400, m),
        ServiceError::Forbidden(m) => error(403, m),
        ServiceError::ResyncRequired(m) => response(
            409,
            &serde_json::json!({ "error": format!("resync required: {m}"), "resyncRequired": true }),
        ),
        e if e.is_retryable() => {
            tracing::warn!(error = %e, "dependency unavailable");
            error(503, "temporarily unavailable; retry")
        }
        e => {
            tracing::error!(error = %e, "internal error");
            error(500, "internal error")
        }
    }
}

/// The request body as bytes: base64-decoded when Lambda says so, gunzipped
/// when the client sent `Content-Encoding: gzip`, never more than `limit`.
pub fn body_bytes(req: &LambdaFunctionUrlRequest, limit: usize) -> Result<Vec<u8>, (i64, String)> {
    let raw = req.body.as_deref().unwrap_or("");
    let bytes = if req.is_base64_encoded {
        base64::engine::general_purpose::STANDARD
            .decode(raw)
            .map_err(|e| (400, format!("body: invalid base64: {e}")))?
    } else {
        raw.as_bytes().to_vec()
    };
    let gzip = req
        .headers
        .get("content-encoding")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("gzip"));
    if !gzip {
        if bytes.len() > limit {
            return Err((
                413,
                format!("body is {} bytes; the limit is {limit}", bytes.len()),
            ));
        }
        return Ok(bytes);
    }
    let mut out = Vec::new();
    let limit64 = u64::try_from(limit).unwrap_or(u64::MAX);
    flate2::read::GzDecoder::new(&bytes[..])
        .take(limit64.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| (400, format!("body: invalid gzip: {e}")))?;
    if out.len() > limit {
        return Err((
            413,
            format!("body inflates past the limit of {limit} bytes"),
        ));
    }
    Ok(out)
}

fn caller(req: &LambdaFunctionUrlRequest) -> Caller {
    Caller {
        principal: req
            .request_context
            .authorizer
            .as_ref()
            .and_then(|a| a.iam.as_ref())
            .and_then(|i| i.user_arn.clone()),
    }
}

/// Handle one Function URL request and print its metrics (EMF).
pub async fn handle<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    req: &LambdaFunctionUrlRequest,
) -> LambdaFunctionUrlResponse {
    let (response, metrics) = handle_measured(ports, req).await;
    metrics.emit(ports.clock.now_millis());
    response
}

/// [`handle`], returning the metrics instead of printing them.
pub async fn handle_measured<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    req: &LambdaFunctionUrlRequest,
) -> (LambdaFunctionUrlResponse, Metrics) {
    let started = ports.clock.now_millis();
    let response = route(ports, req).await;
    let mut metrics = Metrics::new(Stage::Intake);
    record(&mut metrics, req, &response);
    metrics.latency(ports.clock.now_millis().saturating_sub(started));
    (response, metrics)
}

/// Batches accepted or refused (by reason), and 5xx answers as errors.
fn record(
    metrics: &mut Metrics,
    req: &LambdaFunctionUrlRequest,
    response: &LambdaFunctionUrlResponse,
) {
    let status = response.status_code;
    metrics.count(m::ERRORS, usize::from(status >= 500));
    let method = req.request_context.http.method.as_deref().unwrap_or("");
    let path = req
        .raw_path
        .as_deref()
        .or(req.request_context.http.path.as_deref())
        .unwrap_or("/");
    let batch_post = method.eq_ignore_ascii_case("POST")
        && matches!(path.trim_matches('/'), "" | "batches" | "changes");
    if !batch_post {
        return;
    }
    if (200..300).contains(&status) {
        metrics.count(m::BATCHES_ACCEPTED, 1);
        metrics.count(m::BATCHES_REFUSED, 0);
        let body: serde_json::Value = response
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str(b).ok())
            .unwrap_or_default();
        for (key, field) in [(m::CLUSTER_ID, "clusterId"), (m::BATCH_ID, "batchId")] {
            if let Some(v) = body.get(field).and_then(|v| v.as_str()) {
                metrics.property(key, v);
            }
        }
    } else {
        metrics.count(m::BATCHES_ACCEPTED, 0);
        metrics.count_reason(m::BATCHES_REFUSED, &refusal_reason(status), 1);
    }
}

/// A refused batch's status as a reason code.
pub fn refusal_reason(status: i64) -> String {
    match status {
        400 => "BadRequest".into(),
        403 => "Forbidden".into(),
        409 => "ResyncRequired".into(),
        413 => "TooLarge".into(),
        429 => "Throttled".into(),
        500 => "Internal".into(),
        503 => "Unavailable".into(),
        other => format!("Http{other}"),
    }
}

async fn route<S: Store, E: Ec2, B: Bus, C: Clock>(
    ports: &Ports<S, E, B, C>,
    req: &LambdaFunctionUrlRequest,
) -> LambdaFunctionUrlResponse {
    let method = req
        .request_context
        .http
        .method
        .as_deref()
        .unwrap_or("")
        .to_ascii_uppercase();
    let path = req
        .raw_path
        .as_deref()
        .or(req.request_context.http.path.as_deref())
        .unwrap_or("/");
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match (method.as_str(), segments.as_slice()) {
        ("POST", [] | ["batches"]) => {
            let body = match body_bytes(req, ports.config.max_body_bytes) {
                Ok(b) => b,
                Err((status, m)) => return error(status, m),
            };
            match intake::accept(
                &ports.store,
                &ports.bus,
                &ports.clock,
                &ports.config,
                &ports.access,
                &caller(req),
                &body,
            )
            .await
            {
                Ok(accepted) => response(202, &serde_json::to_value(&accepted).unwrap_or_default()),
                Err(e) => service_error(&e),
            }
        }
        ("POST", ["changes"]) => {
            let body = match body_bytes(req, ports.config.max_body_bytes) {
                Ok(b) => b,
                Err((status, m)) => return error(status, m),
            };
            match flotilla_service::changes::accept_changes(
                &ports.store,
                &ports.bus,
                &ports.clock,
                &ports.config,
                &ports.access,
                &caller(req),
                &body,
            )
            .await
            {
                Ok(accepted) => response(202, &serde_json::to_value(&accepted).unwrap_or_default()),
                Err(e) => service_error(&e),
            }
        }
        ("GET", ["clusters", id]) => {
            match intake::cluster_view(
                &ports.store,
                &ports.clock,
                &ports.config,
                &ports.access,
                &caller(req),
                id,
            )
            .await
            {
                Ok(view) => response(200, &serde_json::to_value(&view).unwrap_or_default()),
                Err(e) => service_error(&e),
            }
        }
        ("POST", ["clusters", id, "actions"]) => {
            let body = match body_bytes(req, ports.config.max_body_bytes) {
                Ok(b) => b,
                Err((status, m)) => return error(status, m),
            };
            match intake::acknowledge(
                &ports.store,
                &ports.clock,
                &ports.access,
                &caller(req),
                id,
                &body,
            )
            .await
            {
                Ok(report) => response(200, &serde_json::to_value(&report).unwrap_or_default()),
                Err(e) => service_error(&e),
            }
        }
        (_, [] | ["batches"] | ["changes"] | ["clusters", _] | ["clusters", _, "actions"]) => {
            error(405, format!("method {method} not allowed on {path}"))
        }
        _ => error(404, format!("no route for {method} {path}")),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn request(body: &[u8], base64: bool, gzip: bool) -> LambdaFunctionUrlRequest {
        let sample = include_str!("../../../events/intake-post.json");
        let mut req: LambdaFunctionUrlRequest =
            serde_json::from_str(sample).expect("sample event parses");
        req.is_base64_encoded = base64;
        req.body = Some(if base64 {
            base64::engine::general_purpose::STANDARD.encode(body)
        } else {
            String::from_utf8_lossy(body).into_owned()
        });
        if gzip {
            req.headers.insert(
                "content-encoding",
                aws_lambda_events::http::HeaderValue::from_static("gzip"),
            );
        }
        req
    }

    #[test]
    fn the_sample_event_names_an_iam_caller_and_a_batch_route() {
        let req: LambdaFunctionUrlRequest =
            serde_json::from_str(include_str!("../../../events/intake-post.json")).expect("parses");
        assert!(caller(&req)
            .principal
            .is_some_and(|p| p.starts_with("arn:aws:sts::")));
        assert_eq!(req.raw_path.as_deref(), Some("/batches"));
        let body = body_bytes(&req, 6 << 20).expect("body");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("json body");
        assert_eq!(v["clusterId"], "demo");
    }

    #[test]
    fn bodies_decode_from_base64_and_gzip_within_the_limit() {
        let plain = br#"{"clusterId":"demo"}"#;
        assert_eq!(
            body_bytes(&request(plain, false, false), 100).expect("plain"),
            plain
        );
        assert_eq!(
            body_bytes(&request(plain, true, false), 100).expect("b64"),
            plain
        );
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(plain).expect("gzip");
        let z = gz.finish().expect("gzip");
        assert_eq!(
            body_bytes(&request(&z, true, true), 100).expect("gzip"),
            plain
        );
        // Too big, before or after inflating (a gzip bomb stops at the limit).
        assert_eq!(
            body_bytes(&request(plain, false, false), 10).unwrap_err().0,
            413
        );
        let zeros = vec![0u8; 1 << 20];
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&zeros).expect("gzip");
        let bomb = gz.finish().expect("gzip");
        assert!(bomb.len() < 10_000);
        assert_eq!(
            body_bytes(&request(&bomb, true, true), 64 << 10)
                .unwrap_err()
                .0,
            413
        );
        let mut bad = request(plain, true, false);
        bad.body = Some("%%% not base64".into());
        assert_eq!(body_bytes(&bad, 100).unwrap_err().0, 400);
        assert_eq!(
            body_bytes(&request(b"not gzip", false, true), 100)
                .unwrap_err()
                .0,
            400
        );
    }
}

#[cfg(test)]
mod metrics_tests {
    use super::*;

    fn sample() -> LambdaFunctionUrlRequest {
        serde_json::from_str(include_str!("../../../events/intake-post.json")).expect("parses")
    }

    #[test]
    fn batch_posts_count_as_accepted_or_refused_by_reason() {
        let req = sample();
        let accepted = response(
            202,
            &serde_json::json!({"clusterId": "demo", "batchId": "b1", "pendingPods": 3}),
        );
        let mut mm = Metrics::new(Stage::Intake);
        record(&mut mm, &req, &accepted);
        assert_eq!(mm.get(m::BATCHES_ACCEPTED), Some(1.0));
        assert_eq!(mm.get(m::BATCHES_REFUSED), Some(0.0));
        assert_eq!(mm.get(m::ERRORS), Some(0.0));
        let doc = &mm.documents(0)[0];
        assert_eq!(doc["ClusterId"], "demo");
        assert_eq!(doc["BatchId"], "b1");

        for (status, reason, errors) in [
            (400, "BadRequest", 0.0),
            (403, "Forbidden", 0.0),
            (413, "TooLarge", 0.0),
            (503, "Unavailable", 1.0),
            (500, "Internal", 1.0),
            (418, "Http418", 0.0),
        ] {
            let mut mm = Metrics::new(Stage::Intake);
            record(&mut mm, &req, &error(status, "no"));
            assert_eq!(mm.get(m::BATCHES_ACCEPTED), Some(0.0), "{status}");
            assert_eq!(
                mm.get_reason(m::BATCHES_REFUSED, reason),
                Some(1.0),
                "{status}"
            );
            assert_eq!(mm.get(m::ERRORS), Some(errors), "{status}");
        }

        // Other routes: no batch counts, but a 5xx is an error.
        let mut get = sample();
        get.raw_path = Some("/clusters/demo".into());
        get.request_context.http.method = Some("GET".into());
        let mut mm = Metrics::new(Stage::Intake);
        record(&mut mm, &get, &error(503, "later"));
        assert_eq!(mm.get(m::BATCHES_ACCEPTED), None);
        assert_eq!(mm.get(m::ERRORS), Some(1.0));
    }
}
