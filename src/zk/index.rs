//! The deployment index (`/deployment-index`): its layout, the walk that finds deploy nodes,
//! the reader agents use, and the invalidation other writers use.
//!
//! Layout (format 1):
//!
//! ```text
//! /deployment-index                  {"format": 1, "version": V, "generation": "g7", …}
//! /deployment-index/g7               {"format": 1, "targets": T, "paths": P}
//! /deployment-index/g7/t-<target>    {"target": "<target>", "chunks": K, "paths": [...]}
//! /deployment-index/g7/t-<target>/c1 {"paths": [...]}        (chunks 1..K, only if K > 1)
//! ```
//!
//! The root names the live generation. No node is called `deploy`, so the original agent's
//! walk (which looks for `deploy` nodes) finds nothing here. A target's paths are sorted;
//! they are split into chunks of at most [`CHUNK_BYTES`] of data each.
//!
//! Trust rule: the root's `version` and `generation` are written by the same multi-op
//! transaction that sets `/hosts` `version` (see [`crate::sync`]), so the two nodes then share
//! their `mzxid`. An agent uses the index only if `/hosts` `mzxid` equals the root's `mzxid`
//! (nothing wrote `/hosts` since: no resume, halt, foreign syncer or hand-made version bump),
//! the root's `version` equals the `/hosts` version and the version the pass acts on, the
//! generation and all chunks it names exist, and none of the index nodes it reads after the
//! root was written after the root (`mzxid` no later than the root's). Anything else: walk.
//!
//! Updates: a sync walks the tree after its apply and compares the deploy-node paths found
//! with the generation live before the sync (read whole). Equal: that generation is made live
//! again for the new version (the root alone is written, with `/hosts`). Different: the
//! entries and chunks that change ([`entry_writes`], at most `IN_PLACE_BYTES`) and the
//! generation's own node are written in that same transaction, so the index and `/hosts` move
//! together and a reader never sees a half-updated generation; a reader that read the root
//! before such a transaction and the entries after it finds the generation node newer than
//! the root, and walks. A bigger change writes a whole new generation, made live by the
//! transaction. Either way the live generation holds exactly what the walk found. A
//! generation the root no longer names (invalidated by `tree import` or a sync) is never
//! reused. An agent of a version that does not compare `mzxid`s may, in that race, read
//! the next version's entries (each one transaction's, with the tree at that version); the
//! pass that version's change of `/hosts` wakes runs as always.
//!
//! Reading ahead: a reader may send, in the multi-read of `/hosts` and the root, what it
//! expects to read next ([`Guess`]): the entries of the generation it last used and of the
//! one after it (`guessed_generations`), and the nodes it last needed. Where the root names
//! one of those generations, its entries are not read again; the nodes are the caller's to
//! use (the agent uses them when they are all it needs). A pass of an agent whose
//! deployments did not change then finds them in one round trip instead of three, whether
//! the sync kept the generation, updated it in place or wrote a new one.

use super::paths::RESERVED_ROOTS;
use std::collections::BTreeMap;

use serde_json::{json, Value};
use zookeeper_client::MultiReadResult;

use super::multiread::{data_and_stat, read_all, read_at_once, Want, BATCH};
use super::{call, decode, encode, join, Client, ZkError};
use crate::tree::Props;

/// The index's root node.
pub use super::paths::DEPLOYMENT_INDEX as INDEX;
/// The layout this code writes and reads.
pub(crate) const FORMAT: u64 = 1;
/// Most bytes of paths in one index node (well under ZooKeeper's 1 MiB node limit).
pub(crate) const CHUNK_BYTES: usize = 256 * 1024;

/// Top-level subtrees discovery (and the index's walk) never walks: the reserved roots.
pub(crate) const SKIPPED_ROOTS: [&str; RESERVED_ROOTS.len()] = RESERVED_ROOTS;

/// The node of a target in a generation.
pub(crate) fn target_node(generation: &str, target: &str) -> String {
    format!("{INDEX}/{generation}/t-{target}")
}

/// Walks the tree (children lists only, pipelined) for deploy nodes `<app>/deploy/<target>`
/// whose target satisfies `keep`, skipping [`SKIPPED_ROOTS`]. Returns the sorted paths and the
/// number of children lists read.
pub async fn walk_deploy_nodes(
    client: &Client,
    keep: &(dyn Fn(&str) -> bool + Sync),
) -> Result<(Vec<String>, usize), ZkError> {
    let mut found = Vec::new();
    let mut walked = 0usize;
    read_all(
        client,
        vec![Want::Children("/".into())],
        |want, result, queue| {
            let (Want::Children(path), MultiReadResult::Children { children }) = (want, result)
            else {
                return;
            };
            walked += 1;
            let is_deploy = path.ends_with("/deploy");
            for name in children {
                let child = join(&path, &name);
                if SKIPPED_ROOTS.contains(&child.as_str()) {
                    continue;
                }
                if is_deploy && keep(&name) {
                    found.push(child.clone());
                }
                queue.push(Want::Children(child));
            }
        },
    )
    .await?;
    found.sort();
    Ok((found, walked))
}

/// Groups deploy-node paths by target (their last name), each list sorted.
pub(crate) fn by_target(paths: &[String]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in paths {
        let target = p.rsplit_once('/').map(|(_, t)| t).unwrap_or(p);
        out.entry(target.to_string()).or_default().push(p.clone());
    }
    for list in out.values_mut() {
        list.sort();
    }
    out
}

/// Splits sorted paths into chunks of at most [`CHUNK_BYTES`] bytes of path text (at least
/// one path per chunk, and at least one chunk).
pub(crate) fn chunks(paths: &[String]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = vec![Vec::new()];
    let mut bytes = 0;
    for p in paths {
        let size = p.len() + 4;
        let last = out.last_mut().expect("one chunk");
        if !last.is_empty() && bytes + size > CHUNK_BYTES {
            out.push(Vec::new());
            bytes = 0;
        }
        out.last_mut().expect("one chunk").push(p.clone());
        bytes += size;
    }
    out
}

/// The nodes of one generation, parents first: `(path, data)`.
pub fn generation_nodes(generation: &str, paths: &[String]) -> Vec<(String, Vec<u8>)> {
    let grouped = by_target(paths);
    let mut nodes = vec![(
        format!("{INDEX}/{generation}"),
        generation_data(grouped.len(), paths.len()),
    )];
    for (target, list) in &grouped {
        nodes.extend(entry_nodes(generation, target, &chunks(list)));
    }
    nodes
}

/// The data of a generation's own node.
pub(crate) fn generation_data(targets: usize, paths: usize) -> Vec<u8> {
    encode(&props(json!({
        "format": FORMAT,
        "targets": targets,
        "paths": paths,
    })))
}

/// The nodes of one target's entry, `parts` its paths in chunks: the entry, then its chunks.
fn entry_nodes(generation: &str, target: &str, parts: &[Vec<String>]) -> Vec<(String, Vec<u8>)> {
    let node = target_node(generation, target);
    let mut nodes = vec![(node.clone(), entry_data(target, parts))];
    for (i, part) in parts.iter().enumerate().skip(1) {
        nodes.push((format!("{node}/c{i}"), chunk_data(part)));
    }
    nodes
}

fn entry_data(target: &str, parts: &[Vec<String>]) -> Vec<u8> {
    encode(&props(json!({
        "target": target,
        "chunks": parts.len(),
        "paths": parts.first().cloned().unwrap_or_default(),
    })))
}

fn chunk_data(part: &[String]) -> Vec<u8> {
    encode(&props(json!({ "paths": part })))
}

/// Most bytes an in-place update of a generation may send in the one transaction that also
/// sets `/hosts` (well under ZooKeeper's 1 MiB request limit); a bigger change writes a new
/// generation.
pub(crate) const IN_PLACE_BYTES: usize = 512 * 1024;

/// One write of an in-place update of a generation's entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EntryWrite {
    /// A new entry or chunk.
    Create {
        /// The node.
        path: String,
        /// Its data.
        data: Vec<u8>,
    },
    /// An entry or chunk whose paths change.
    Set {
        /// The node.
        path: String,
        /// Its new data.
        data: Vec<u8>,
    },
    /// An entry or chunk no longer needed (chunks before their entry).
    Delete {
        /// The node.
        path: String,
    },
}

impl EntryWrite {
    /// The node written.
    pub(crate) fn path(&self) -> &str {
        match self {
            EntryWrite::Create { path, .. }
            | EntryWrite::Set { path, .. }
            | EntryWrite::Delete { path } => path,
        }
    }

    /// What it costs in a request, roughly: path, data and a header.
    pub(crate) fn bytes(&self) -> usize {
        let data = match self {
            EntryWrite::Create { data, .. } | EntryWrite::Set { data, .. } => data.len(),
            EntryWrite::Delete { .. } => 0,
        };
        self.path().len() + data + 64
    }
}

/// The writes that turn a generation holding `old` (per target, its paths as stored, in
/// chunks) into one holding `paths`, in an order a transaction can apply (an entry before its
/// chunks are created, after they are deleted). Targets whose paths are unchanged are not
/// written.
pub(crate) fn entry_writes(
    generation: &str,
    old: &BTreeMap<String, Vec<Vec<String>>>,
    paths: &[String],
) -> Vec<EntryWrite> {
    let new: BTreeMap<String, Vec<Vec<String>>> = by_target(paths)
        .into_iter()
        .map(|(target, list)| (target, chunks(&list)))
        .collect();
    let empty = Vec::new();
    let mut targets: Vec<&String> = old.keys().chain(new.keys()).collect();
    targets.sort();
    targets.dedup();
    let mut out = Vec::new();
    for target in targets {
        let (before, after) = (
            old.get(target).unwrap_or(&empty),
            new.get(target).unwrap_or(&empty),
        );
        if before == after {
            continue;
        }
        let node = target_node(generation, target);
        let chunk = |i: usize| format!("{node}/c{i}");
        let mut deletes: Vec<EntryWrite> = (after.len().max(1)..before.len())
            .rev()
            .map(|i| EntryWrite::Delete { path: chunk(i) })
            .collect();
        if after.is_empty() {
            out.append(&mut deletes);
            out.push(EntryWrite::Delete { path: node });
            continue;
        }
        let data = entry_data(target, after);
        if before.is_empty() {
            out.push(EntryWrite::Create {
                path: node.clone(),
                data,
            });
        } else if before.len() != after.len() || before[0] != after[0] {
            out.push(EntryWrite::Set {
                path: node.clone(),
                data,
            });
        }
        for (i, part) in after.iter().enumerate().skip(1) {
            let data = chunk_data(part);
            match before.get(i) {
                Some(was) if was == part => {}
                Some(_) => out.push(EntryWrite::Set {
                    path: chunk(i),
                    data,
                }),
                None => out.push(EntryWrite::Create {
                    path: chunk(i),
                    data,
                }),
            }
        }
        out.append(&mut deletes);
    }
    out
}

fn props(v: Value) -> Props {
    match v {
        Value::Object(m) => m.into_iter().collect(),
        _ => Props::new(),
    }
}

/// The root's data naming a live generation.
pub(crate) fn root_props(version: &Value, generation: &str, paths: usize) -> Props {
    props(json!({
        "format": FORMAT,
        "version": version,
        "generation": generation,
        "paths": paths,
    }))
}

/// The generation number of a generation node name (`g7` → 7).
pub(crate) fn generation_number(name: &str) -> Option<u64> {
    name.strip_prefix('g')?.parse().ok()
}

/// Marks the index as describing nothing (its `mzxid` changes, so agents walk until the next
/// sync writes a new one). Does nothing if there is no index.
pub(crate) async fn invalidate(client: &Client, why: &str) -> Result<(), ZkError> {
    let data = encode(&props(json!({"format": FORMAT, "invalidated": why})));
    match call("set", INDEX, client.set_data(INDEX, &data, None)).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_no_node() => Ok(()),
        Err(e) => Err(e),
    }
}

/// What the index said for a host.
#[derive(Debug, Clone, PartialEq)]
pub enum IndexAnswer {
    /// The deploy-node paths of the targets asked for, sorted.
    Paths(Vec<String>),
    /// The index cannot be trusted (the reason, for the log).
    Unusable(String),
}

/// What a reader of the index expects to read, from what it read the last time: sent in the
/// multi-read of `/hosts` and the root, so that a guess that holds saves the round trips that
/// would read them after it. A wrong guess costs bytes, never a wrong answer: what was
/// guessed is used only where the root proves it right.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guess {
    /// The generation last used. Its entries and those of the generation after it are read
    /// with the root (`guessed_generations`).
    pub generation: Option<String>,
    /// Nodes whose data the reader expects to need next (read "ahead", at the same point as
    /// the root: [`IndexRead::ahead`]).
    pub nodes: Vec<String>,
}

impl Guess {
    /// The guess for the next read, after one that used `generation` and needed `nodes`.
    pub(crate) fn after(generation: Option<&str>, nodes: Vec<String>) -> Guess {
        Guess {
            generation: generation.map(String::from),
            nodes,
        }
    }
}

/// The generations whose entries a reader reads with the root: the one it last used (a sync
/// that changes no deploy node, or updates the generation in place, keeps it live) and the
/// one after it (a sync that writes a new generation numbers it one more than the highest
/// there, and keeps only the live one and the one before).
pub(crate) fn guessed_generations(guess: &Guess) -> Vec<String> {
    guess
        .generation
        .as_deref()
        .and_then(generation_number)
        .map(|n| vec![format!("g{n}"), format!("g{}", n + 1)])
        .unwrap_or_default()
}

/// What [`read_index`] read.
#[derive(Debug)]
pub struct IndexRead {
    /// The answer.
    pub answer: IndexAnswer,
    /// The generation that answered (with [`IndexAnswer::Paths`]).
    pub generation: Option<String>,
    /// The number of nodes read (index nodes and nodes read ahead).
    pub reads: usize,
    /// True if the guess named the live generation: its entries came with the root, in one
    /// round trip.
    pub hit: bool,
    /// The guessed nodes read with the root, in one atomic snapshot with it (none when the
    /// guess named more than one multi-read holds).
    pub ahead: Vec<(String, MultiReadResult)>,
    /// The cluster version the index describes (`/hosts`' version at the root's read), with
    /// [`IndexAnswer::Paths`].
    pub(crate) version: Option<Value>,
}

/// Reads the index entries of `targets`, if the index certainly describes the tree at the
/// cluster version `acting_on` (see the module doc for the rule), with what `guess` names
/// (read in the same multi-read as the root).
pub async fn read_index(
    client: &Client,
    targets: &[&str],
    acting_on: Option<&Value>,
    guess: &Guess,
) -> Result<IndexRead, ZkError> {
    let mut seen: Vec<&str> = Vec::new();
    for t in targets {
        if !seen.contains(t) {
            seen.push(t);
        }
    }
    let entries = |generation: &str| {
        let mut wanted = vec![format!("{INDEX}/{generation}")];
        wanted.extend(seen.iter().map(|t| target_node(generation, t)));
        wanted
    };
    // One multi-read: /hosts and the root are seen at the same point, and with them the
    // guessed generations' entries and the nodes guessed (if they fit in one request).
    let guessed = guessed_generations(guess);
    let mut first = vec![super::paths::HOSTS.to_string(), INDEX.to_string()];
    first.extend(guessed.iter().flat_map(|g| entries(g)));
    let (mut got, ahead, reads) = read_first(client, first, &guess.nodes).await?;
    let mut read = IndexRead {
        answer: IndexAnswer::Unusable(String::new()),
        generation: None,
        reads,
        hit: false,
        ahead,
        version: None,
    };
    let unusable = |mut read: IndexRead, why: String| {
        read.answer = IndexAnswer::Unusable(why);
        Ok(read)
    };
    let (Some(hosts), Some((root, root_mzxid))) = (got.remove(0), got.remove(0)) else {
        return unusable(read, "no /hosts or no index".into());
    };
    let (version, generation) = match check_root(&hosts, &root, root_mzxid, acting_on) {
        Ok(found) => found,
        Err(why) => return unusable(read, why),
    };
    let wanted = entries(generation);
    match guessed.iter().position(|g| g == generation) {
        Some(i) => {
            got = got
                .drain(i * wanted.len()..(i + 1) * wanted.len())
                .collect();
            read.hit = true;
        }
        None => {
            // Guessed wrong (or not at all): the entries of the live generation now.
            got = read_data(client, &wanted).await?;
            read.reads += wanted.len();
        }
    }
    if got[0].is_none() {
        return unusable(read, format!("generation {generation} is gone"));
    }
    // A sync updates the live generation in place, in the transaction that moves the root:
    // a node written after the root was read belongs to a later version.
    if got.iter().flatten().any(|(_, mzxid)| *mzxid > root_mzxid) {
        return unusable(read, "the index changed while it was read".into());
    }
    let entries: Vec<_> = wanted.iter().skip(1).zip(got.drain(..).skip(1)).collect();
    let mut paths = match entry_paths(client, entries, &seen, root_mzxid, &mut read.reads).await? {
        Ok(paths) => paths,
        Err(Distrust::Stale(why)) => return unusable(read, why),
        Err(Distrust::Wrong(why)) => return wrong(read, why),
    };
    paths.sort();
    paths.dedup();
    read.answer = IndexAnswer::Paths(paths);
    read.generation = Some(generation.to_string());
    read.version = Some(version.clone());
    Ok(read)
}

/// A node's decoded data and `mzxid`, as [`read_index`] reads them (`None`: no node).
type Read = Option<(Props, i64)>;

/// [`read_index`]'s first multi-read: `first` (`/hosts`, the root, the guessed generations'
/// entries) and, if they fit in one request, the guessed `nodes`. Returns what `first` read,
/// the guessed nodes with their results, and the number of nodes read.
async fn read_first(
    client: &Client,
    mut first: Vec<String>,
    nodes: &[String],
) -> Result<(Vec<Read>, Vec<(String, MultiReadResult)>, usize), ZkError> {
    let fixed = first.len();
    if fixed + nodes.len() <= BATCH {
        first.extend(nodes.iter().cloned());
    }
    let wants: Vec<Want> = first.iter().cloned().map(Want::Data).collect();
    let mut results = read_at_once(client, &wants).await?;
    let ahead: Vec<(String, MultiReadResult)> = first
        .split_off(fixed)
        .into_iter()
        .zip(results.split_off(fixed))
        .collect();
    let got = first
        .iter()
        .zip(results)
        .map(|(path, result)| {
            Ok(data_and_stat(path, result)?.map(|(data, stat)| (decode(&data), stat.mzxid)))
        })
        .collect::<Result<Vec<_>, ZkError>>()?;
    Ok((got, ahead, wants.len()))
}

/// The version the index's `root` describes and its live generation, if the index may
/// answer for `acting_on` (see the module doc): else why not. `hosts` is `/hosts` as read
/// with the root.
fn check_root<'r>(
    (hosts, hosts_mzxid): &(Props, i64),
    root: &'r Props,
    root_mzxid: i64,
    acting_on: Option<&Value>,
) -> Result<(&'r Value, &'r str), String> {
    if root.get("format").and_then(Value::as_u64) != Some(FORMAT) {
        return Err("unknown index format".into());
    }
    let (Some(version), Some(generation)) = (
        root.get("version"),
        root.get("generation").and_then(Value::as_str),
    ) else {
        return Err("the index describes no version".into());
    };
    if *hosts_mzxid != root_mzxid {
        return Err("/hosts was written after the index (resume, halt or another writer)".into());
    }
    if hosts.get("version") != Some(version) || acting_on.is_some_and(|v| v != version) {
        return Err("the index describes another version".into());
    }
    if generation_number(generation).is_none() {
        return Err(format!("bad generation name {generation:?}"));
    }
    Ok((version, generation))
}

/// Why an index reading is not used: stale or malformed (logged as information), or wrong,
/// naming what the walk could not find (logged as a warning).
enum Distrust {
    Stale(String),
    Wrong(String),
}

/// The deploy-node paths of the targets' `entries` (each entry node with what was read of it,
/// in the order of `targets`) and of their chunks, read here (counted in `reads`).
async fn entry_paths(
    client: &Client,
    entries: Vec<(&String, Option<(Props, i64)>)>,
    targets: &[&str],
    root_mzxid: i64,
    reads: &mut usize,
) -> Result<Result<Vec<String>, Distrust>, ZkError> {
    let malformed = |node: &str| Ok(Err(Distrust::Stale(format!("malformed index node {node}"))));
    let mut paths = Vec::new();
    let mut more = Vec::new();
    for ((node, entry), target) in entries.into_iter().zip(targets) {
        let Some((props, _)) = entry else { continue };
        let Some(list) = path_list(&props) else {
            return malformed(node);
        };
        if let Some(why) = wrong_entry(node, target, &list) {
            return Ok(Err(Distrust::Wrong(why)));
        }
        paths.extend(list);
        let count = props.get("chunks").and_then(Value::as_u64).unwrap_or(0);
        if count == 0 || count > 100_000 {
            return malformed(node);
        }
        more.extend((1..count).map(|i| (format!("{node}/c{i}"), *target)));
    }
    if more.is_empty() {
        return Ok(Ok(paths));
    }
    let nodes: Vec<String> = more.iter().map(|(n, _)| n.clone()).collect();
    let got = read_data(client, &nodes).await?;
    *reads += more.len();
    for ((node, target), entry) in more.iter().zip(got) {
        let Some((props, mzxid)) = entry else {
            return Ok(Err(Distrust::Stale(format!("index chunk {node} missing"))));
        };
        if mzxid > root_mzxid {
            return Ok(Err(Distrust::Stale(
                "the index changed while it was read".into(),
            )));
        }
        let Some(list) = path_list(&props) else {
            return Ok(Err(Distrust::Stale(format!(
                "index chunk {node} malformed"
            ))));
        };
        if let Some(why) = wrong_entry(node, target, &list) {
            return Ok(Err(Distrust::Wrong(why)));
        }
        paths.extend(list);
    }
    Ok(Ok(paths))
}

/// An index reading whose entry names what the walk could not find: unusable, and said as a
/// warning (the index is wrong, not merely stale).
fn wrong(mut read: IndexRead, why: String) -> Result<IndexRead, ZkError> {
    tracing::warn!("the deployment index is wrong: {why}");
    read.answer = IndexAnswer::Unusable(why);
    Ok(read)
}

/// Why the paths of index node `node` (target `target`'s entry or chunk) are not what the
/// walk finds: a path that is not `<app>/deploy/<target>` (`<app>` a node path outside the
/// reserved roots, without empty, `.` or `..` names). `None` when every path is.
pub(crate) fn wrong_entry(node: &str, target: &str, paths: &[String]) -> Option<String> {
    let bad = paths.iter().find(|p| !is_deploy_node_of(p, target))?;
    Some(format!(
        "index node {node} names {bad:?}, which is not <app>/deploy/{target}"
    ))
}

/// True if `path` is `<app>/deploy/<target>` as the walk finds deploy nodes.
fn is_deploy_node_of(path: &str, target: &str) -> bool {
    let Some(app) = path
        .strip_suffix(target)
        .and_then(|p| p.strip_suffix("/deploy/"))
    else {
        return false;
    };
    let names: Vec<&str> = app.split('/').skip(1).collect();
    app.starts_with('/')
        && !names.is_empty()
        && names
            .iter()
            .all(|n| !n.is_empty() && *n != "." && *n != "..")
        && !super::paths::is_reserved_root(names[0])
}

/// An index node's `paths`: absolute node paths, or `None` if missing or malformed.
pub(crate) fn path_list(props: &Props) -> Option<Vec<String>> {
    props
        .get("paths")?
        .as_array()?
        .iter()
        .map(|p| p.as_str().filter(|s| s.starts_with('/')).map(String::from))
        .collect()
}

/// Reads the data of `paths` in pipelined multi-reads: per path, its properties and `mzxid`,
/// or `None` if it does not exist. Results in the order asked.
async fn read_data(
    client: &Client,
    paths: &[String],
) -> Result<Vec<Option<(Props, i64)>>, ZkError> {
    let mut found: BTreeMap<String, (Props, i64)> = BTreeMap::new();
    read_all(
        client,
        paths.iter().cloned().map(Want::Data).collect(),
        |want, result, _| {
            if let (Want::Data(p), MultiReadResult::Data { data, stat }) = (want, result) {
                found.insert(p, (decode(&data), stat.mzxid));
            }
        },
    )
    .await?;
    Ok(paths.iter().map(|p| found.get(p).cloned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_bound_size_and_keep_order() {
        let paths: Vec<String> = (0..20_000)
            .map(|i| format!("/c/app{i:06}/deploy/h"))
            .collect();
        let parts = chunks(&paths);
        assert!(parts.len() > 1);
        for p in &parts {
            assert!(p.iter().map(|s| s.len() + 4).sum::<usize>() <= CHUNK_BYTES);
        }
        assert_eq!(parts.concat(), paths);
        assert_eq!(chunks(&[]), vec![Vec::<String>::new()]);
    }

    /// A generation as nodes (path → data), as written whole.
    fn nodes_of(paths: &[String]) -> BTreeMap<String, Vec<u8>> {
        generation_nodes("g1", paths).into_iter().collect()
    }

    /// Applies `writes` to `nodes` as ZooKeeper would, in order: a create needs its parent
    /// and no node, a set needs the node, a delete needs the node and no children.
    fn applied(
        mut nodes: BTreeMap<String, Vec<u8>>,
        writes: &[EntryWrite],
    ) -> BTreeMap<String, Vec<u8>> {
        for w in writes {
            let path = w.path().to_string();
            let parent = path.rsplit_once('/').unwrap().0.to_string();
            match w {
                EntryWrite::Create { data, .. } => {
                    assert!(nodes.contains_key(&parent), "{path}: no parent");
                    assert!(
                        nodes.insert(path.clone(), data.clone()).is_none(),
                        "{path} exists"
                    );
                }
                EntryWrite::Set { data, .. } => {
                    assert!(
                        nodes.insert(path.clone(), data.clone()).is_some(),
                        "{path} missing"
                    );
                }
                EntryWrite::Delete { .. } => {
                    let prefix = format!("{path}/");
                    assert!(
                        !nodes.keys().any(|k| k.starts_with(&prefix)),
                        "{path} has children"
                    );
                    assert!(nodes.remove(&path).is_some(), "{path} missing");
                }
            }
        }
        nodes
    }

    /// Stored entries (per target, its chunks) of a generation written whole.
    fn stored(paths: &[String]) -> BTreeMap<String, Vec<Vec<String>>> {
        by_target(paths)
            .into_iter()
            .map(|(t, list)| (t, chunks(&list)))
            .collect()
    }

    #[test]
    fn entry_writes_turn_one_generation_into_another_writing_only_what_changes() {
        let many = |n: usize, target: &str| -> Vec<String> {
            (0..n)
                .map(|i| format!("/c/app{i:06}/deploy/{target}"))
                .collect()
        };
        let base: Vec<String> = [many(3, "h1"), many(3, "h2"), many(20_000, "big")].concat();
        let cases: Vec<(&str, Vec<String>)> = vec![
            ("unchanged", base.clone()),
            (
                "one target gains a path",
                [base.clone(), vec!["/z/deploy/h1".into()]].concat(),
            ),
            (
                "a target goes",
                base.iter()
                    .filter(|p| !p.ends_with("/h2"))
                    .cloned()
                    .collect(),
            ),
            ("a target comes", [base.clone(), many(2, "h3")].concat()),
            (
                "a chunked target shrinks to one chunk",
                [many(3, "h1"), many(3, "h2"), many(10, "big")].concat(),
            ),
            (
                "a chunked target grows a chunk",
                [base.clone(), many(30_000, "big")].concat(),
            ),
            (
                "a chunked target's last chunk changes",
                [base.clone(), vec!["/zz/deploy/big".into()]].concat(),
            ),
            ("everything goes", Vec::new()),
        ];
        for (what, new) in cases {
            let mut new = new;
            new.sort();
            new.dedup();
            let writes = entry_writes("g1", &stored(&base), &new);
            let mut got = applied(nodes_of(&base), &writes);
            // The generation's own node is written with the transaction, not here.
            let own = format!("{INDEX}/g1");
            let mut want = nodes_of(&new);
            got.remove(&own);
            want.remove(&own);
            assert_eq!(got, want, "{what}");
            // Only what changes: nothing for an unchanged target.
            for w in &writes {
                assert!(
                    !w.path().contains("/t-h2") || what.ends_with(" goes"),
                    "{what}: {w:?}"
                );
            }
            if what == "unchanged" {
                assert!(writes.is_empty());
            }
            if what == "one target gains a path" || what == "a chunked target's last chunk changes"
            {
                assert_eq!(writes.len(), 1, "{what}: {writes:?}");
            }
        }
    }

    #[test]
    fn a_guess_names_the_generation_last_used_and_the_next() {
        let guess = Guess::after(Some("g7"), vec!["/a".into()]);
        assert_eq!(guessed_generations(&guess), ["g7", "g8"]);
        assert_eq!(guess.nodes, ["/a"]);
        assert!(guessed_generations(&Guess::after(None, Vec::new())).is_empty());
        assert!(guessed_generations(&Guess::after(Some("x"), Vec::new())).is_empty());
    }

    #[test]
    fn an_entry_naming_anything_but_a_deploy_node_of_its_target_is_wrong() {
        let ok = |p: &str| wrong_entry("/deployment-index/g1/t-h1", "h1", &[p.into()]).is_none();
        assert!(ok("/acme/web/deploy/h1"));
        assert!(ok("/a/deploy/h1"));
        for bad in [
            "/acme/web/h1",
            "/acme/web/deploy/h2",
            "/acme/web/deploy/xh1",
            "/deploy/h1",
            "/hosts/deploy/h1",
            "/acme//deploy/h1",
            "/acme/../deploy/h1",
            "/acme/web/deploy/h1/x",
        ] {
            assert!(!ok(bad), "{bad}");
        }
        let why = wrong_entry("/deployment-index/g1/t-h1", "h1", &["/x/h1".into()]).unwrap();
        assert!(
            why.contains("/deployment-index/g1/t-h1") && why.contains("/x/h1"),
            "{why}"
        );
    }

    #[test]
    fn no_index_node_is_called_deploy() {
        let paths = vec![
            "/a/deploy/deploy".to_string(),
            "/b/deploy/h1".to_string(),
            "/deploy/deploy".to_string(),
        ];
        for (node, data) in generation_nodes("g1", &paths) {
            assert!(node.split('/').all(|n| n != "deploy"), "{node}");
            assert!(data.len() < super::super::MAX_NODE_DATA);
        }
        assert_eq!(by_target(&paths)["deploy"].len(), 2);
    }
}
