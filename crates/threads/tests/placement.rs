//! Background threads start on the configured cores (one test: the choice
//! is process-wide, so its steps must not run in parallel).

use engram_threads::{BackgroundCpus, PlacementError};

fn cores_of_a_background_thread() -> Vec<usize> {
    engram_threads::spawn("engram-test-bg", || {
        engram_threads::this_thread_cpus().unwrap()
    })
    .unwrap()
    .join()
    .unwrap()
}

#[test]
fn background_threads_start_where_configured() {
    let allowed = engram_threads::this_thread_cpus().unwrap();
    assert!(!allowed.is_empty());

    // The default is auto: the last quarter of this process's cores.
    let auto = engram_threads::resolve(&BackgroundCpus::Auto, &allowed).unwrap();
    assert_eq!(engram_threads::placement(), auto);
    assert_eq!(
        cores_of_a_background_thread(),
        auto.clone().unwrap_or(allowed.clone())
    );

    // One named core.
    let first = allowed[0];
    assert_eq!(
        engram_threads::configure(&BackgroundCpus::List(vec![first])),
        Ok(Some(vec![first]))
    );
    assert_eq!(cores_of_a_background_thread(), vec![first]);
    // The caller's own cores are untouched.
    assert_eq!(engram_threads::this_thread_cpus().unwrap(), allowed);

    // A core the process may not use is refused, and the choice stands.
    let outside = allowed.last().unwrap() + 1;
    assert!(matches!(
        engram_threads::configure(&BackgroundCpus::List(vec![outside])),
        Err(PlacementError::NotAllowed { cpu, .. }) if cpu == outside
    ));
    assert_eq!(engram_threads::placement(), Some(vec![first]));

    // All: no placement.
    assert_eq!(engram_threads::configure(&BackgroundCpus::All), Ok(None));
    assert_eq!(cores_of_a_background_thread(), allowed);
}
