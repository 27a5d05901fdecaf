//! Working on many volumes or consumers of a pass side by side.

use futures::StreamExt;

use crate::controller::Result;

/// How many volumes or consumers one pass works on at once. Their steps are independent
/// API calls, so running them side by side is what makes many volumes fast.
const CONCURRENCY: usize = 16;

/// Runs `work` for every index at once (bounded), applies each result with `apply`,
/// and reports the first error after all have been applied: the effects of the others
/// happened, so their records must not be lost.
pub(crate) async fn for_each_concurrently<T, F, Fut>(
    indices: impl IntoIterator<Item = usize>,
    work: F,
    mut apply: impl FnMut(usize, T),
) -> Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let results: Vec<(usize, Result<T>)> = futures::stream::iter(indices)
        .map(|i| {
            let fut = work(i);
            async move { (i, fut.await) }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut first_error = None;
    for (i, result) in results {
        match result {
            Ok(value) => apply(i, value),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}
