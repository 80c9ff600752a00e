//! One key's token budget shared by two gateway replicas through a real Redis: requests to the
//! real chat model, alternating between the replicas, are admitted until the one budget is
//! spent, then both refuse; each replica alone would have admitted the whole budget.

use crate::harness::{model, register, Options, Server};
use crate::shared_limits::Redis;
use serde_json::{json, Value};

fn replica(data: &std::path::Path, redis: &Redis) -> Server {
    Server::start_in(
        data,
        Options {
            extra_args: vec!["--ratelimit".into(), redis.url()],
            ..Options::default()
        },
    )
}

async fn chat(s: &Server, key: &str) -> reqwest::Response {
    s.post_json(
        "/v1/chat/completions",
        key,
        &json!({"model": "smollm2", "messages": [{"role": "user", "content": "Say hi."}],
                "max_tokens": 16, "temperature": 0}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_on_one_redis_admit_one_token_budget() {
    const BUDGET: u64 = 500;
    let tmp = tempfile::tempdir().unwrap();
    register(tmp.path(), "smollm2", &model("smollm2.gguf"));
    let redis = Redis::start(None);
    let a = replica(tmp.path(), &redis);
    let b = replica(tmp.path(), &redis);
    let key = a.key_with("infer", &["--token-budget", &format!("{BUDGET}/day")]);
    let mut spent = 0u64;
    let mut admitted = [0u32; 2];
    let mut refused_on = None;
    // Each request reserves its prompt plus 16: the budget admits a bounded number of them.
    for i in 0..100 {
        let (s, side) = if i % 2 == 0 { (&a, 0) } else { (&b, 1) };
        let r = chat(s, &key).await;
        match r.status().as_u16() {
            200 => {
                let body: Value = r.json().await.unwrap();
                spent += body["usage"]["total_tokens"].as_u64().unwrap();
                admitted[side] += 1;
            }
            429 => {
                assert!(r.headers().contains_key("retry-after"));
                let policy = r.headers()["ratelimit-policy"].to_str().unwrap().to_owned();
                assert!(
                    policy.contains("\"token-budget\";q=500;w=86400"),
                    "{policy}"
                );
                let body: Value = r.json().await.unwrap();
                assert_eq!(body["error"]["code"], "insufficient_quota", "{body}");
                refused_on = Some(side);
                break;
            }
            other => panic!("{other}: {:?}", r.text().await),
        }
    }
    let refused_on = refused_on.expect("the shared budget ran out");
    eprintln!("admitted {admitted:?}, {spent} of {BUDGET} tokens, refused on replica {refused_on}");
    assert!(
        spent <= BUDGET,
        "{spent} tokens admitted across two replicas, budget {BUDGET}"
    );
    assert!(admitted[0] > 0 && admitted[1] > 0, "{admitted:?}");
    // The other replica refuses too: the budget is one, not one each.
    let other = if refused_on == 0 { &b } else { &a };
    assert_eq!(chat(other, &key).await.status(), 429);
}
