//! A per-topic request whose items the caller may submit only in part:
//! the permitted ones are decided, the others answered with their refusal,
//! in the request's order.

use crate::decide::Decision;
use crate::ApiError;
use crate::ErrorCode;

/// Decides the items of a per-topic request that the caller may submit and
/// answers the others with their refusal, in the request's order: a
/// refused item writes nothing and does not stop the others (as Kafka).
pub fn decide_permitted<I, R>(
    items: &[I],
    refusal: impl Fn(&I) -> Option<ApiError>,
    name: impl Fn(&I) -> String,
    decide: impl FnOnce(&[I]) -> Decision<Vec<(String, Result<R, ApiError>)>>,
) -> Decision<Vec<(String, Result<R, ApiError>)>>
where
    I: Clone,
{
    let refusals: Vec<Option<ApiError>> = items.iter().map(&refusal).collect();
    if refusals.iter().all(Option::is_none) {
        return decide(items);
    }
    let permitted: Vec<I> = items
        .iter()
        .zip(&refusals)
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| i.clone())
        .collect();
    let d = decide(&permitted);
    let mut decided = d.reply.into_iter();
    let mut reply = Vec::with_capacity(items.len());
    for (item, refused) in items.iter().zip(refusals) {
        match refused {
            Some(e) => reply.push((name(item), Err(e))),
            None => match decided.next() {
                Some(r) => reply.push(r),
                None => reply.push((
                    name(item),
                    Err(ApiError::new(ErrorCode::Internal, "no decision for item")),
                )),
            },
        }
    }
    Decision {
        records: d.records,
        reply,
        replayed: d.replayed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_items_keep_their_place_and_write_nothing() {
        let items = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let d = decide_permitted(
            &items,
            |i| (i == "b").then(|| ApiError::new(ErrorCode::TopicAuthorizationFailed, "no")),
            Clone::clone,
            |permitted| {
                assert_eq!(permitted, ["a".to_string(), "c".to_string()]);
                Decision {
                    records: vec![],
                    reply: permitted.iter().map(|n| (n.clone(), Ok(()))).collect(),
                    replayed: None,
                }
            },
        );
        let names: Vec<&str> = d.reply.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert!(d.reply[0].1.is_ok() && d.reply[2].1.is_ok());
        assert_eq!(
            d.reply[1].1.as_ref().unwrap_err().code,
            ErrorCode::TopicAuthorizationFailed
        );
    }
}
