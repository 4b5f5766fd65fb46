//! `flotilla`: plans which nodes a Karpenter-style provisioner would launch
//! for a set of Kubernetes documents, and which nodes it would remove or
//! replace (`disrupt`), locally and without AWS credentials.
//!
//! Exit codes: 0 when a plan (or a set of disruption decisions) was made
//! (even with unschedulable pods or blocked nodes), 1 on input or catalog
//! errors, 2 on usage errors.

mod catalog_cmd;
mod demo;
mod disrupt;
mod inputs;
mod json_out;
mod simulate;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use flotilla_core::catalog::Catalog;
use flotilla_core::model::ClusterState;
use flotilla_core::plan::Plan;
use flotilla_core::scheduler::{self, SchedulerOptions};

/// mimalloc, not glibc's malloc: a plan allocates and frees small
/// requirement sets and vectors millions of times at 10,000 pods (see
/// `shared/bench/README.md`, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "flotilla",
    version,
    about = "Plan the nodes a Karpenter-style provisioner would launch for pending pods, and the nodes it would disrupt",
    long_about = None,
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Read Kubernetes/Karpenter documents and print the provisioning plan.
    Plan(PlanArgs),
    /// Read the cluster's documents and print the nodes a Karpenter-style
    /// disruption controller would remove or replace now, and why; and the
    /// nodes it may not touch, with what blocks them.
    Disrupt(DisruptArgs),
    /// Plan the bundled sample workloads (examples/demo/).
    Demo(DemoArgs),
    /// Run the whole pipeline in memory (intake, schedule, launch into an
    /// EC2 simulator with capacity limits) and print what was launched.
    Simulate(SimulateArgs),
    /// List the instance types of a region's catalog with prices.
    Catalog(CatalogArgs),
    /// List the regions of the embedded catalog.
    Regions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    Table,
    Json,
}

#[derive(Debug, Args)]
struct PlanArgs {
    /// Input files or directories (YAML/JSON, multi-document; `-` reads
    /// stdin). Directories contribute their *.yaml, *.yml and *.json files
    /// in name order.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<String>,
    #[command(flatten)]
    common: PlanOptions,
}

#[derive(Debug, Args)]
struct PlanOptions {
    /// A `aws ec2 describe-instance-types` JSON document replacing the
    /// embedded catalog's instance types.
    #[arg(long, value_name = "FILE")]
    catalog: Option<PathBuf>,
    /// AWS region whose catalog (zones, offerings, prices) is used.
    #[arg(long, default_value = "us-west-2")]
    region: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    output: Output,
    /// Feature gate ReservedCapacity: launch into capacity reservations
    /// given as DescribeCapacityReservations documents.
    #[arg(long)]
    reserved_capacity: bool,
    /// Karpenter's MIN_VALUES_POLICY: `strict` leaves a pod pending when a
    /// new NodeClaim cannot keep a NodePool requirement's `minValues`;
    /// `best-effort` lowers the `minValues` to what the instance types
    /// offer (the NodeClaim is annotated
    /// `karpenter.sh/nodeclaim-min-values-relaxed: "true"`).
    #[arg(long, value_enum, default_value_t = MinValuesPolicyArg::Strict)]
    min_values_policy: MinValuesPolicyArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum MinValuesPolicyArg {
    Strict,
    BestEffort,
}

impl From<MinValuesPolicyArg> for scheduler::MinValuesPolicy {
    fn from(a: MinValuesPolicyArg) -> Self {
        match a {
            MinValuesPolicyArg::Strict => scheduler::MinValuesPolicy::Strict,
            MinValuesPolicyArg::BestEffort => scheduler::MinValuesPolicy::BestEffort,
        }
    }
}

#[derive(Debug, Args)]
struct DisruptArgs {
    /// Input files or directories, as for `plan` (nodes with their bound
    /// pods, NodePools, EC2NodeClasses, DaemonSets, PodDisruptionBudgets,
    /// NodeClaims).
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<String>,
    /// When the decision is taken, RFC 3339 (`2026-11-25T06:00:00Z`);
    /// default: now. Node ages, `consolidateAfter`, `expireAfter` and
    /// scheduled budgets are measured against it.
    #[arg(long, value_name = "RFC3339", value_parser = disrupt::parse_now)]
    now: Option<i64>,
    #[command(flatten)]
    common: PlanOptions,
}

#[derive(Debug, Args)]
struct SimulateArgs {
    /// Input files or directories, as for `plan`.
    #[arg(short = 'f', long = "filename", value_name = "FILE", required = true, num_args = 1..)]
    files: Vec<String>,
    /// AWS region whose catalog the simulator offers.
    #[arg(long, default_value = "us-west-2")]
    region: String,
    /// Limit a capacity pool: `TYPE[:ZONE][:spot|on-demand]=N` (repeatable;
    /// `=0` makes every launch of that pool fail with
    /// InsufficientInstanceCapacity).
    #[arg(long = "capacity", value_name = "POOL=N", value_parser = simulate::parse_capacity)]
    capacity: Vec<simulate::CapacityLimit>,
    /// Feature gate ReservedCapacity.
    #[arg(long)]
    reserved_capacity: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Debug, Args)]
struct DemoArgs {
    #[command(flatten)]
    common: PlanOptions,
}

#[derive(Debug, Args)]
struct CatalogArgs {
    /// Region to list.
    #[arg(long, default_value = "us-west-2")]
    region: String,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Table)]
    output: Output,
}

fn main() -> ExitCode {
    init_tracing();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Ignore a closed stdout (`flotilla plan ... | head`).
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Simulate(args) => {
            let sources = inputs::read_all(&args.files)?;
            simulate::run(
                &sources,
                &args.region,
                &args.capacity,
                args.reserved_capacity,
                args.output == Output::Json,
            )
        }
        Command::Plan(args) => {
            let sources = inputs::read_all(&args.files)?;
            let plan = plan(&sources, &args.common)?;
            print_plan(&plan, args.common.output)
        }
        Command::Disrupt(args) => {
            let sources = inputs::read_all(&args.files)?;
            let state = load(&sources)?;
            let catalog = build_catalog(&state, &args.common)?;
            // The CLI is the imperative shell: the clock is read here, never
            // in core.
            let now = match args.now {
                Some(t) => t,
                None => disrupt::clock_now(),
            };
            let decisions = disrupt::decide(
                &state,
                &catalog,
                now,
                args.common.reserved_capacity,
                args.common.min_values_policy.into(),
            );
            for w in &decisions.warnings {
                eprintln!("warning: {w}");
            }
            match args.common.output {
                Output::Table => write_stdout(&disrupt::to_table(&decisions, now)),
                Output::Json => print_json(&decisions, "serialising the decisions"),
            }
        }
        Command::Demo(args) => {
            let sources = demo::sources();
            let plan = plan(&sources, &args.common)?;
            if args.common.output == Output::Table {
                let mut out = std::io::stdout().lock();
                writeln!(
                    out,
                    "Flotilla demo: planning the sample workloads of examples/demo/ ({} files) \
                     against the {} catalog.\n",
                    sources.len(),
                    args.common.region
                )?;
            }
            print_plan(&plan, args.common.output)
        }
        Command::Catalog(args) => {
            let catalog = Catalog::embedded(&args.region)
                .with_context(|| format!("loading the embedded catalog for {}", args.region))?;
            let text = match args.output {
                Output::Table => catalog_cmd::table(&catalog),
                Output::Json => catalog_cmd::json(&catalog)?,
            };
            write_stdout(&text)
        }
        Command::Regions => {
            let mut text = String::new();
            for r in flotilla_core::catalog::embedded::embedded_regions() {
                text.push_str(&format!("{r}\n"));
            }
            write_stdout(&text)
        }
    }
}

/// Loads the inputs into one cluster state. Warnings go to stderr.
fn load(sources: &[inputs::Input]) -> Result<ClusterState> {
    let srcs: Vec<flotilla_input::Source> = sources.iter().map(inputs::Input::source).collect();
    let state = flotilla_input::load(&srcs)?;
    tracing::debug!(
        pending = state.pending_pods.len(),
        nodes = state.nodes.len(),
        node_pools = state.node_pools.len(),
        pdbs = state.pdbs.len(),
        node_claims = state.node_claims.len(),
        "inputs loaded"
    );
    for w in &state.warnings {
        eprintln!("warning: {w}");
    }
    Ok(state)
}

/// Loads the inputs, builds the catalog and schedules. Warnings go to stderr.
fn plan(sources: &[inputs::Input], opts: &PlanOptions) -> Result<Plan> {
    let state = load(sources)?;
    let catalog = build_catalog(&state, opts)?;
    tracing::debug!(
        region = %catalog.region,
        types = catalog.entries.len(),
        source = %catalog.source,
        "catalog ready"
    );
    let sched = SchedulerOptions {
        reserved_capacity: opts.reserved_capacity,
        min_values_policy: opts.min_values_policy.into(),
        ..SchedulerOptions::default()
    };
    let plan = scheduler::schedule(&state, &catalog, &sched);
    for w in &plan.warnings {
        eprintln!("warning: {w}");
    }
    Ok(plan)
}

/// The catalog to plan against: `--catalog` wins, then an `InstanceTypes`
/// document among the inputs, then the embedded catalog of `--region`.
fn build_catalog(state: &ClusterState, opts: &PlanOptions) -> Result<Catalog> {
    if let Some(path) = &opts.catalog {
        if state.instance_types.is_some() {
            eprintln!(
                "warning: --catalog {} replaces the InstanceTypes document among the inputs",
                path.display()
            );
        }
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let doc: serde_json::Value = serde_json::from_slice(&bytes)
            .with_context(|| format!("--catalog {}: not a JSON document", path.display()))?;
        let infos = flotilla_core::catalog::describe::parse_describe_instance_types(&doc)
            .with_context(|| format!("--catalog {}", path.display()))?;
        return catalog_from_infos(&opts.region, infos)
            .with_context(|| format!("--catalog {}", path.display()));
    }
    if let Some(infos) = &state.instance_types {
        return catalog_from_infos(&opts.region, infos.clone())
            .context("building the catalog from the InstanceTypes document in the inputs");
    }
    Catalog::embedded(&opts.region)
        .with_context(|| format!("loading the embedded catalog for {}", opts.region))
}

fn catalog_from_infos(
    region: &str,
    infos: Vec<flotilla_core::catalog::InstanceTypeInfo>,
) -> Result<Catalog> {
    Ok(Catalog::from_infos(region, infos)?)
}

fn print_plan(plan: &Plan, output: Output) -> Result<()> {
    match output {
        Output::Table => write_stdout(&plan.to_table()),
        Output::Json => print_json(plan, "serialising the plan"),
    }
}

/// Indented JSON on stdout (arrays of scalars on one line, see
/// `json_out`), streamed: a large output is never held as one string.
fn print_json<T: serde::Serialize>(value: &T, what: &'static str) -> Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    json_out::write(&mut out, value).context(what)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}

fn write_stdout(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
