//! A condition: retry a 429 up to three attempts, waiting the server's
//! Retry-After, then switch to the fallback model; switch at once when the
//! model is overloaded. Config: {"fallback": "provider/model"} (required).
use retryhost::{Attempt, Config, Decider, Decision, ErrorClass};

struct Rule {
    fallback: String,
}

impl Decider for Rule {
    fn decide(&self, a: &Attempt) -> Result<Decision, String> {
        if a.status == 429 && a.number < 3 {
            return Ok(Decision { use_retry_after: true, max_attempts: 3, ..Decision::retry(0) });
        }
        if a.status == 429 || a.class == ErrorClass::OVERLOADED {
            return Ok(Decision::switch_to(&self.fallback));
        }
        Ok(Decision::none()) // no opinion: the next condition decides
    }
}

fn new(config: &Config) -> Result<Rule, String> {
    let mut j = config.json();
    let mut fallback = String::new();
    if !j.blank() && j.object_begin() {
        while j.next_key() {
            if j.key_is("fallback") {
                if j.field() {
                    fallback = j.string(256, "longer than 256 bytes");
                }
            } else {
                j.unknown();
            }
        }
    }
    j.finish()?;
    if fallback.is_empty() {
        return Err("config: \"fallback\": the fallback model is required".into());
    }
    Ok(Rule { fallback })
}

retryhost::condition!(Rule, new);
