//! A line diff in the unified format (`diff -u`'s hunks), for showing how
//! a resource's JSON changes. The common head and tail are cut first (a
//! config change is usually local); the rest is compared by longest common
//! subsequence, or, past [`MAX_CELLS`], shown as removed then added.

/// Most cells of the comparison table (lines before times lines after, of
/// what differs): 4 million, 16 MiB.
const MAX_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Removed,
    Added,
}

/// The edit script from `a` to `b`, line by line.
fn script<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..].iter().rev().zip(b[head..].iter().rev()).take_while(|(x, y)| x == y).count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut out: Vec<(Op, &str)> = a[..head].iter().map(|l| (Op::Same, *l)).collect();
    if ma.len().saturating_mul(mb.len()) > MAX_CELLS {
        out.extend(ma.iter().map(|l| (Op::Removed, *l)));
        out.extend(mb.iter().map(|l| (Op::Added, *l)));
    } else {
        // lcs[i][j]: the longest common subsequence of ma[i..] and mb[j..].
        let w = mb.len() + 1;
        let mut lcs = vec![0u32; (ma.len() + 1) * w];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                out.push((Op::Same, ma[i]));
                (i, j) = (i + 1, j + 1);
            } else if i < ma.len() && (j == mb.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1]) {
                // Removals first, as `diff -u` shows a replaced line.
                out.push((Op::Removed, ma[i]));
                i += 1;
            } else {
                out.push((Op::Added, mb[j]));
                j += 1;
            }
        }
    }
    out.extend(a[a.len() - tail..].iter().map(|l| (Op::Same, *l)));
    out
}

/// `before` -> `after` as unified hunks with `context` lines around each
/// change; at most `max_lines` lines, then a line saying how many more.
/// Empty when they are equal.
pub(super) fn unified(before: &str, after: &str, context: usize, max_lines: usize) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (before.lines().collect(), after.lines().collect());
    let ops = script(&a, &b);
    let changed: Vec<usize> = ops.iter().enumerate().filter(|(_, (op, _))| *op != Op::Same).map(|(i, _)| i).collect();
    // Lines of each side before each op (line numbers of hunks).
    let (mut before_a, mut before_b) = (Vec::with_capacity(ops.len() + 1), Vec::with_capacity(ops.len() + 1));
    let (mut na, mut nb) = (0, 0);
    for (op, _) in &ops {
        before_a.push(na);
        before_b.push(nb);
        na += usize::from(*op != Op::Added);
        nb += usize::from(*op != Op::Removed);
    }
    before_a.push(na);
    before_b.push(nb);
    let mut lines: Vec<String> = Vec::new();
    let mut more = 0;
    let mut k = 0;
    while k < changed.len() {
        // A hunk: changes less than 2 * context + 1 apart go together.
        let start = changed[k].saturating_sub(context);
        let mut last = changed[k];
        while k + 1 < changed.len() && changed[k + 1] <= last + 2 * context + 1 {
            k += 1;
            last = changed[k];
        }
        k += 1;
        let end = (last + context + 1).min(ops.len());
        if lines.len() >= max_lines {
            // Past the cut: only counted.
            more += 1 + end - start;
            continue;
        }
        // Line numbers (from 1) where the hunk starts on each side.
        let (from_a, from_b) = (before_a[start], before_b[start]);
        let (len_a, len_b) = (before_a[end] - from_a, before_b[end] - from_b);
        lines.push(format!("@@ -{},{len_a} +{},{len_b} @@", from_a + 1, from_b + 1));
        for (op, l) in &ops[start..end] {
            let sign = match op {
                Op::Same => ' ',
                Op::Removed => '-',
                Op::Added => '+',
            };
            lines.push(format!("{sign}{l}"));
        }
    }
    more += lines.len().saturating_sub(max_lines);
    lines.truncate(max_lines);
    if more > 0 {
        lines.push(format!("... {more} more lines"));
    }
    let mut out = lines.join("\n");
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_hunks() {
        assert_eq!(unified("a\nb\n", "a\nb\n", 3, 100), "");
    }

    #[test]
    fn a_changed_line_is_one_hunk_with_its_context() {
        let before = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let after = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        // As `diff -u` prints it.
        assert_eq!(unified(before, after, 3, 100), "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n");
    }

    #[test]
    fn distant_changes_are_separate_hunks_and_near_ones_merge() {
        let lines = |swap: &[(u32, &str)]| -> String {
            (1..=20u32)
                .map(|i| swap.iter().find(|(at, _)| *at == i).map_or(format!("{i}\n"), |(_, s)| format!("{s}\n")))
                .collect()
        };
        let before = lines(&[]);
        let after = lines(&[(2, "two"), (18, "eighteen")]);
        let d = unified(&before, &after, 2, 100);
        assert_eq!(d.matches("@@").count(), 4, "two hunks: {d}");
        assert!(d.starts_with("@@ -1,4 +1,4 @@\n 1\n-2\n+two\n 3\n 4\n"), "{d}");
        assert!(d.contains("@@ -16,5 +16,5 @@\n 16\n 17\n-18\n+eighteen\n 19\n 20\n"), "{d}");
        let near = lines(&[(5, "five"), (8, "eight")]);
        assert_eq!(unified(&before, &near, 2, 100).matches("@@").count(), 2, "one hunk");
    }

    #[test]
    fn insertions_and_deletions_count_their_sides() {
        let d = unified("a\nb\nc\n", "a\nx\ny\nb\n", 1, 100);
        assert_eq!(d, "@@ -1,3 +1,4 @@\n a\n+x\n+y\n b\n-c\n");
    }

    #[test]
    fn a_long_diff_is_cut_and_says_how_much() {
        let before: String = (0..100).map(|i| format!("{i}\n")).collect();
        let after: String = (0..100).map(|i| format!("x{i}\n")).collect();
        let d = unified(&before, &after, 3, 10);
        assert_eq!(d.lines().count(), 11);
        assert!(d.ends_with("... 191 more lines\n"), "{d}");
    }
}
