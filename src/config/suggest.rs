//! "Did you mean …?" hints: the closest expected name to a misspelt one, if any is close.

/// The candidate closest to `input`, when close enough to be a plausible typo: same letters
/// ignoring case, `_` and `-` (`maxTimeout` → `max_timeout`), or a small edit distance.
pub fn did_you_mean<'a>(input: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let normal = normalize(input);
    if let Some(same) = candidates.iter().find(|c| normalize(c) == normal) {
        return Some(same);
    }
    let limit = (input.chars().count() / 3).clamp(1, 3);
    candidates
        .iter()
        .map(|c| (edit_distance(&normal, &normalize(c)), *c))
        .filter(|(distance, _)| *distance <= limit)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, c)| c)
}

fn normalize(name: &str) -> Vec<char> {
    name.chars()
        .filter(|c| *c != '_' && *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Optimal string alignment distance (Levenshtein plus adjacent transpositions).
fn edit_distance(a: &[char], b: &[char]) -> usize {
    // Rows for i-2, i-1 and i.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current: Vec<usize> = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            let mut best = (previous[j] + cost)
                .min(previous[j + 1] + 1)
                .min(current[j] + 1);
            if i > 0 && j > 0 && a[i] == b[j - 1] && a[i - 1] == b[j] {
                best = best.min(before[j - 1] + 1);
            }
            current[j + 1] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const FIELDS: &[&str] = &[
        "command",
        "args",
        "env",
        "inherit_env",
        "cwd",
        "sharing",
        "restart",
    ];

    #[test]
    fn suggestions() {
        assert_eq!(did_you_mean("comand", FIELDS), Some("command"));
        assert_eq!(did_you_mean("agrs", FIELDS), Some("args"));
        assert_eq!(did_you_mean("inheritEnv", FIELDS), Some("inherit_env"));
        assert_eq!(did_you_mean("inherit-env", FIELDS), Some("inherit_env"));
        assert_eq!(did_you_mean("restrat", FIELDS), Some("restart"));
        assert_eq!(did_you_mean("timeout", FIELDS), None);
        assert_eq!(did_you_mean("x", FIELDS), None);
    }
}
