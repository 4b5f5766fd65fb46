//! Criterion benches of the scheduler on the embedded us-west-2 catalog
//! (every instance type of the region), for each workload mix of
//! `flotilla_bench::mixes` at 100, 1,000, 10,000 and 50,000 pending pods
//! (ten samples each; the 50k runs take a few seconds an iteration, so a
//! full run takes a while: filter with `--bench scheduler -- mixed` or
//! `-- /10000`). `cargo bench -p flotilla-bench`.
//! The one-shot JSON figures (pods/s, peak RSS, price) come from
//! `cargo xtask bench`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use flotilla_bench::mixes;
use flotilla_core::catalog::Catalog;
use flotilla_core::scheduler::{schedule, SchedulerOptions};

fn scheduler(c: &mut Criterion) {
    let Ok(catalog) = Catalog::embedded("us-west-2") else {
        eprintln!("embedded catalog unavailable");
        return;
    };
    let opts = SchedulerOptions::default();
    let mut group = c.benchmark_group("schedule");
    group.sample_size(10);
    for mix in mixes::MIXES {
        for n in [100, 1_000, 10_000, 50_000] {
            // Ten samples of the large sizes need more than the default
            // five seconds.
            group.measurement_time(std::time::Duration::from_secs(if n >= 10_000 {
                n as u64 / 1_000
            } else {
                5
            }));
            let Some(state) = mixes::build(mix, n, 1) else {
                continue;
            };
            group.throughput(Throughput::Elements(n as u64));
            group.bench_with_input(BenchmarkId::new(*mix, n), &state, |b, s| {
                b.iter(|| schedule(s, &catalog, &opts));
            });
        }
    }
    group.finish();
}

criterion_group!(benches, scheduler);
criterion_main!(benches);
