//! Planning cost: 1,000 compositions x 10 resources, one composition x 10,000 resources, and
//! one CEL readiness evaluation. Throughput is per resource (criterion prints time/element).
//! The baseline in each group is canonical hashing of the same manifests alone, measured in
//! the same run, so the plan's overhead over "just hash everything" is the ratio of the two.

#![allow(clippy::unwrap_used)] // benchmark set-up: inputs are generated and valid

use std::collections::HashMap;
use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use plan::{CompositionInfo, Desired, PlanInput, PlanOptions, ResourceKey};
use serde_json::{Value, json};

fn manifests(comp: usize, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": format!("c{comp}-r{i}"), "namespace": "ns", "annotations": {
                    "enoki.dev/readiness-group": (i % 3).to_string(),
                    "enoki.dev/readiness": "self.status.readyReplicas >= self.spec.replicas",
                }},
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}},
            })
        })
        .collect()
}

fn observed(ms: &[Value]) -> plan::Observed {
    ms.iter()
        .map(|m| {
            let mut l = m.clone();
            l["metadata"]["resourceVersion"] = json!("1");
            l["status"] = json!({"readyReplicas": 3});
            (ResourceKey::of(&l).unwrap(), l)
        })
        .collect()
}

fn plan_once(ms: &[Value], obs: &plan::Observed, comp: &CompositionInfo) -> plan::Plan {
    let items: Vec<Desired> = ms
        .iter()
        .map(|m| Desired {
            manifest: m.clone(),
            tombstone: false,
        })
        .collect();
    let prepared = plan::prepare(&items, comp).unwrap();
    plan::plan(PlanInput {
        prepared: &prepared,
        composition: comp,
        observed: obs,
        recorded: &HashMap::new(),
        previous: &HashMap::new(),
        options: PlanOptions::default(),
    })
}

fn bench(c: &mut Criterion) {
    let comp = CompositionInfo {
        name: "c".into(),
        namespace: "ns".into(),
        uid: "u".into(),
        ..Default::default()
    };

    let many: Vec<(Vec<Value>, plan::Observed)> = (0..1000)
        .map(|i| {
            let ms = manifests(i, 10);
            let obs = observed(&ms);
            (ms, obs)
        })
        .collect();
    let mut g = c.benchmark_group("1000 compositions x 10 resources");
    g.sample_size(10).throughput(Throughput::Elements(10_000));
    g.bench_function("baseline: canonical hash only", |b| {
        b.iter(|| {
            many.iter()
                .flat_map(|(ms, _)| ms)
                .map(|m| plan::snapshot::hash(black_box(m)).len())
                .sum::<usize>()
        })
    });
    g.bench_function("prepare + plan", |b| {
        b.iter(|| {
            many.iter()
                .map(|(ms, obs)| plan_once(black_box(ms), obs, &comp).steps.len())
                .sum::<usize>()
        })
    });
    g.finish();

    let ms = manifests(0, 10_000);
    let obs = observed(&ms);
    let mut g = c.benchmark_group("1 composition x 10000 resources");
    g.sample_size(10).throughput(Throughput::Elements(10_000));
    g.bench_function("baseline: canonical hash only", |b| {
        b.iter(|| {
            ms.iter()
                .map(|m| plan::snapshot::hash(black_box(m)).len())
                .sum::<usize>()
        })
    });
    g.bench_function("prepare + plan", |b| {
        b.iter(|| plan_once(black_box(&ms), &obs, &comp).steps.len())
    });
    g.finish();

    let expr =
        plan::expr::Expr::compile("self.status.readyReplicas >= self.spec.replicas").unwrap();
    let live = plan::expr::to_cel(&obs.values().next().unwrap().clone());
    let mut g = c.benchmark_group("CEL");
    g.throughput(Throughput::Elements(1));
    g.bench_function("one readiness evaluation", |b| {
        b.iter(|| {
            expr.eval_bool(&[("self", black_box(live.clone()))])
                .unwrap()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
