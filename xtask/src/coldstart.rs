//! `cargo xtask coldstart`: the cold start of each Lambda binary, measured
//! against a local Lambda Runtime API emulator.
//!
//! Per function and run: a fresh process of the release binary (native
//! architecture) is started with the Lambda environment pointing at an
//! emulator on loopback. `init` is the time from spawn to the runtime's
//! first `GET /runtime/invocation/next` (process start, logging, AWS config
//! and clients built); `firstInvoke` is the time from handing it the sample
//! event (from `events/`) to its `response` or `error` post. The AWS calls
//! go to moto's server (DynamoDB table and EventBridge bus created first),
//! so the first invocation includes real HTTP round trips on loopback.
//!
//! With `--arm64`, the binaries are the arm64 bootstraps `cargo xtask
//! sam-build` left in `.aws-sam/build/<Function>/bootstrap` (what Lambda
//! runs), started under qemu-user (`qemu-aarch64`, Debian's `qemu-user`, with
//! the arm64 glibc of `libc6-arm64-cross` as its `-L` root). Emulation makes
//! these figures an upper bound: each instruction is translated on x86_64.
//!
//! The emulator speaks just enough of the Runtime API
//! (<https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html>):
//! `next` (the event once, then held open), `response`, `error`,
//! `init/error`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// (function, binary, sample event). The disrupt stage's rule delivers the
/// same `aws.events` Scheduled Event as the sweep's.
const FUNCTIONS: [(&str, &str, &str); 5] = [
    ("intake", "flotilla-fn-intake", "intake-post.json"),
    ("schedule", "flotilla-fn-schedule", "batch-accepted.json"),
    ("launch", "flotilla-fn-launch", "node-claims-planned.json"),
    ("sweep", "flotilla-fn-sweep", "sweep-schedule.json"),
    ("disrupt", "flotilla-fn-disrupt", "sweep-schedule.json"),
];

/// What the emulator saw, with when.
#[derive(Debug)]
enum Seen {
    Next(Instant),
    /// The function's response; for a Function URL handler, its `statusCode`.
    Response(Instant, Option<u64>),
    Error(Instant, String),
    InitError(String),
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request { method, path, body })
}

fn reply(s: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    let mut out = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let _ = s.write_all(out.as_bytes());
    let _ = s.write_all(body);
    let _ = s.flush();
}

/// Serves one runtime connection: the event on the first `next`, then
/// holds later `next`s open (the process is killed after its response).
fn serve(stream: TcpStream, event: std::sync::Arc<Vec<u8>>, tx: mpsc::Sender<Seen>) {
    let Ok(mut w) = stream.try_clone() else {
        return;
    };
    let mut r = BufReader::new(stream);
    let mut served = false;
    while let Some(req) = read_request(&mut r) {
        let now = Instant::now();
        let text = String::from_utf8_lossy(&req.body).into_owned();
        match (req.method.as_str(), req.path.as_str()) {
            ("GET", p) if p.ends_with("/runtime/invocation/next") => {
                let _ = tx.send(Seen::Next(now));
                if served {
                    // Hold: the next invocation never comes.
                    std::thread::sleep(Duration::from_secs(3600));
                    return;
                }
                served = true;
                let deadline = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() + 60_000)
                    .unwrap_or(0);
                reply(
                    &mut w,
                    "200 OK",
                    &[
                        ("Content-Type", "application/json".into()),
                        ("Lambda-Runtime-Aws-Request-Id", "coldstart-1".into()),
                        ("Lambda-Runtime-Deadline-Ms", deadline.to_string()),
                        (
                            "Lambda-Runtime-Invoked-Function-Arn",
                            "arn:aws:lambda:us-east-1:123456789012:function:coldstart".into(),
                        ),
                        ("Lambda-Runtime-Trace-Id", "Root=1-0-0;Sampled=0".into()),
                    ],
                    &event,
                );
            }
            ("POST", p) if p.ends_with("/response") => {
                let status = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["statusCode"].as_u64());
                let _ = tx.send(Seen::Response(now, status));
                reply(&mut w, "202 Accepted", &[], b"{}");
            }
            ("POST", p) if p.ends_with("/init/error") => {
                let _ = tx.send(Seen::InitError(text));
                reply(&mut w, "202 Accepted", &[], b"{}");
            }
            ("POST", p) if p.ends_with("/error") => {
                let _ = tx.send(Seen::Error(now, text));
                reply(&mut w, "202 Accepted", &[], b"{}");
            }
            _ => reply(&mut w, "404 Not Found", &[], b"{}"),
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One cold start: (init, first invoke, outcome).
/// How to start a function binary: directly, or under qemu-user.
#[derive(Clone, Copy)]
enum Launcher {
    Native,
    Qemu,
}

/// Where Debian's `libc6-arm64-cross` puts the arm64 glibc qemu-user loads.
const ARM64_SYSROOT: &str = "/usr/aarch64-linux-gnu";

impl Launcher {
    fn command(self, binary: &Path) -> Command {
        match self {
            Launcher::Native => Command::new(binary),
            Launcher::Qemu => {
                let mut c = Command::new("qemu-aarch64");
                c.arg("-L").arg(ARM64_SYSROOT).arg(binary);
                c
            }
        }
    }
}

fn one_run(
    launcher: Launcher,
    binary: &Path,
    event: &[u8],
    env: &[(String, String)],
) -> Result<(Duration, Duration, String)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let api = listener.local_addr()?;
    let (tx, rx) = mpsc::channel();
    let event = std::sync::Arc::new(event.to_vec());
    std::thread::spawn(move || {
        for s in listener.incoming().map_while(Result::ok) {
            let (event, tx) = (event.clone(), tx.clone());
            std::thread::spawn(move || serve(s, event, tx));
        }
    });
    let start = Instant::now();
    let _child = Killed(
        launcher
            .command(binary)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("AWS_LAMBDA_RUNTIME_API", api.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?,
    );
    let wait = |what: &str| -> Result<Seen> {
        rx.recv_timeout(Duration::from_secs(60))
            .with_context(|| format!("{}: no {what} within 60 s", binary.display()))
    };
    let next = match wait("first `next`")? {
        Seen::Next(t) => t,
        Seen::InitError(e) => bail!("{}: init error: {e}", binary.display()),
        other => bail!("{}: unexpected {other:?} before `next`", binary.display()),
    };
    let (done, outcome) = match wait("response")? {
        Seen::Response(_, Some(status)) if status >= 400 => bail!(
            "{}: the sample event was answered {status}: that is not the path to measure",
            binary.display()
        ),
        Seen::Response(t, None) => (t, "response".to_string()),
        Seen::Response(t, Some(status)) => (t, format!("response {status}")),
        Seen::Error(t, e) => (
            t,
            format!("error: {}", e.chars().take(200).collect::<String>()),
        ),
        other => bail!("{}: unexpected {other:?} after `next`", binary.display()),
    };
    Ok((next - start, done - next, outcome))
}

/// moto's server from the venv, with the table and bus the functions use.
fn moto(venv_bin: &Path) -> Result<(Killed, u16)> {
    let port = free_port()?;
    let child = Killed(
        Command::new(venv_bin.join("moto_server"))
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting moto_server")?,
    );
    let script = format!(
        r#"
import time, boto3
kw = dict(endpoint_url="http://127.0.0.1:{port}", region_name="us-east-1",
          aws_access_key_id="testing", aws_secret_access_key="testing")
for _ in range(300):
    try:
        ddb = boto3.client("dynamodb", **kw); ddb.list_tables(); break
    except Exception:
        time.sleep(0.1)
ddb.create_table(TableName="flotilla", BillingMode="PAY_PER_REQUEST",
    AttributeDefinitions=[{{"AttributeName": "pk", "AttributeType": "S"}},
                          {{"AttributeName": "sk", "AttributeType": "S"}}],
    KeySchema=[{{"AttributeName": "pk", "KeyType": "HASH"}},
               {{"AttributeName": "sk", "KeyType": "RANGE"}}])
boto3.client("events", **kw).create_event_bus(Name="flotilla")
"#
    );
    let status = Command::new(venv_bin.join("python"))
        .args(["-c", &script])
        .status()
        .context("creating the table and bus in moto")?;
    if !status.success() {
        bail!("creating the table and bus in moto failed ({status})");
    }
    Ok((child, port))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e4).round() / 10.0
}

/// `cargo xtask coldstart [--runs N]`.
pub fn coldstart(
    args: &[String],
    root: &Path,
    target: &Path,
    mut cargo: Command,
    venv_bin: &Path,
) -> Result<()> {
    let mut runs = 5usize;
    let mut launcher = Launcher::Native;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--runs" => {
                runs = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n > 0)
                    .context("--runs takes a positive number")?;
            }
            "--arm64" => launcher = Launcher::Qemu,
            other => bail!(
                "coldstart: unknown argument {other:?} (usage: coldstart [--runs N] [--arm64])"
            ),
        }
    }
    if let Launcher::Native = launcher {
        cargo.args(["build", "--release"]);
        for (_, package, _) in FUNCTIONS {
            cargo.args(["-p", package]);
        }
        crate::run("coldstart: release build of the five functions", cargo)?;
    } else if !Path::new(ARM64_SYSROOT).join("lib").is_dir() {
        bail!(
            "coldstart --arm64 needs qemu-user and the arm64 glibc: \
             apt-get install qemu-user libc6-arm64-cross libgcc-s1-arm64-cross"
        );
    }
    let (_moto, port) = moto(venv_bin)?;
    let env: Vec<(String, String)> = [
        ("AWS_REGION", "us-east-1".to_string()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512".into()),
        ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
        ("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/coldstart".into()),
        ("AWS_LAMBDA_LOG_STREAM_NAME", "coldstart".into()),
        ("TABLE_NAME", "flotilla".into()),
        ("EVENT_BUS_NAME", "flotilla".into()),
        ("FLOTILLA_BATCH_IDLE_SECONDS", "0".into()),
        ("FLOTILLA_BATCH_MAX_SECONDS", "0".into()),
        // events/intake-post.json is cluster "demo", signed by this role:
        // intake denies clusters nobody is mapped to.
        (
            "FLOTILLA_CLUSTER_PRINCIPALS",
            r#"{"demo": ["arn:aws:sts::123456789012:assumed-role/flotilla-agent/*"]}"#.into(),
        ),
        ("RUST_LOG", "warn".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    crate::banner("coldstart: runs against the Runtime API emulator");
    let mut rows = Vec::new();
    for (name, _, sample) in FUNCTIONS {
        let binary: PathBuf = match launcher {
            Launcher::Native => target.join("release").join(name),
            Launcher::Qemu => sam_bootstrap(root, name),
        };
        let bytes = std::fs::metadata(&binary)
            .with_context(|| format!("{} missing after the build", binary.display()))?
            .len();
        let text = std::fs::read_to_string(root.join("events").join(sample))
            .with_context(|| format!("reading events/{sample}"))?;
        let mut env = env.clone();
        env.push((
            "AWS_LAMBDA_FUNCTION_NAME".into(),
            format!("flotilla-{name}"),
        ));
        let (mut inits, mut firsts, mut outcome) = (Vec::new(), Vec::new(), String::new());
        for _ in 0..runs {
            let (init, first, o) = one_run(launcher, &binary, text.as_bytes(), &env)?;
            inits.push(init);
            firsts.push(first);
            outcome = o;
        }
        let row = serde_json::json!({
            "function": name,
            "binaryBytes": bytes,
            "runs": runs,
            "initMsMedian": ms(median(inits.clone())),
            "initMsMax": ms(inits.iter().copied().max().unwrap_or_default()),
            "firstInvokeMsMedian": ms(median(firsts.clone())),
            "firstInvokeMsMax": ms(firsts.iter().copied().max().unwrap_or_default()),
            "event": format!("events/{sample}"),
            "outcome": outcome,
        });
        println!("    {row}");
        rows.push(row);
    }
    let report = serde_json::json!({
        "arch": match launcher {
            Launcher::Native => std::env::consts::ARCH,
            Launcher::Qemu => "aarch64 (qemu-user on x86_64)",
        },
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "coldstart": rows,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&report).unwrap_or_default()
    );
    Ok(())
}

/// `.aws-sam/build/<Function>/bootstrap` of function `name` (`intake` ->
/// `Intake`), as `cargo xtask sam-build` leaves it.
fn sam_bootstrap(root: &Path, name: &str) -> PathBuf {
    let mut logical = name.to_string();
    if let Some(first) = logical.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    root.join(".aws-sam")
        .join("build")
        .join(logical)
        .join("bootstrap")
}
