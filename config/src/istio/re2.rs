//! Go's `regexp.Compile` as a check, with Go's error text; Go's `regexp/syntax` (Perl flags) is the reference.

// The parser below follows Go's (`src/regexp/syntax/parse.go`) step by step: the same parse stack of
// finished pieces and pseudo entries for `(` and `|`, the same order of checks, the same slice of the
// pattern quoted in each error. It does not build Go's tree; each stack entry carries what the checks
// need: its height (Go refuses trees taller than 1000), its compiled size as Go's `calcSize` counts it
// (Go refuses over 3,355,443 instructions) and the largest product of nested repeat counts inside it
// (Go refuses `x{n,m}` when that product passes 1000). `regexp.Compile` adds no check after parsing.
//
// Where this differs from Go:
// - The height and size come from a model of Go's tree: literal runes merge into strings and
//   single-character branches merge into classes as in Go, but the prefix factoring of alternations
//   (`abc|abd` to `ab[cd]`) is not modelled. The model agrees with Go on Go's own tests; the two limits
//   cannot be reached by patterns of istiod's 1024 bytes (height at most about 0.75 per byte, size at
//   most about 2000 per byte), so for istiod they never decide.
// - Go's third limit, 33,554,432 runes summed over all character classes (about 26,000 copies of
//   `\pL`), is not checked: it needs the rune counts of every Unicode table.
// - Input is `&str`, so Go's "invalid UTF-8" refusal cannot happen.
// - `\p{...}` names are Go's newest rules: Unicode 15.0.0 general categories (with `Cn` and `LC`),
//   scripts, category aliases (`Letter`), `Any`, `Assigned`, `ASCII`, matched ignoring case, `_`, `-`
//   and spaces. Go 1.24 and older took only exact names (`\p{Greek}`, not `\p{greek}`).

/// Go's `maxRepeat`: the largest count in `x{n,m}`, and the largest product of nested counts.
const MAX_REPEAT: i64 = 1000;
/// Go's `maxHeight`: the tallest parse tree.
const MAX_HEIGHT: u32 = 1000;
/// Go's `maxSize`: 128 MiB of 40-byte instructions.
const MAX_SIZE: i64 = (128 << 20) / 40;

// Go's `ErrorCode` texts, those its parser raises.
const INVALID_CHAR_RANGE: &str = "invalid character class range";
const INVALID_ESCAPE: &str = "invalid escape sequence";
const INVALID_NAMED_CAPTURE: &str = "invalid named capture";
const INVALID_PERL_OP: &str = "invalid or unsupported Perl syntax";
const INVALID_REPEAT_OP: &str = "invalid nested repetition operator";
const INVALID_REPEAT_SIZE: &str = "invalid repeat count";
const MISSING_BRACKET: &str = "missing closing ]";
const MISSING_PAREN: &str = "missing closing )";
const MISSING_REPEAT_ARGUMENT: &str = "missing argument to repetition operator";
const TRAILING_BACKSLASH: &str = "trailing backslash at end of expression";
const UNEXPECTED_PAREN: &str = "unexpected )";
const NESTING_DEPTH: &str = "expression nests too deeply";
const LARGE: &str = "expression too large";

/// Go's POSIX class names, as in `[[:alpha:]]` (each may also be negated, `[[:^alpha:]]`).
const POSIX_CLASSES: [&str; 14] = [
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper", "word",
    "xdigit",
];

/// Go's `regexp.Compile` as a check: Ok, or Go's error text, e.g.
/// "error parsing regexp: invalid repeat count: `{2000}`".
pub fn check(pattern: &str) -> Result<(), String> {
    Parser::new(pattern).parse().map_err(|r| format!("error parsing regexp: {}: `{}`", r.code, r.expr))
}

/// Why Go refuses a pattern: its error code and the part of the pattern its error quotes.
struct Refusal<'a> {
    code: &'static str,
    expr: &'a str,
}

type Parsed<'a, T> = Result<T, Refusal<'a>>;

fn refuse<'a>(code: &'static str, expr: &'a str) -> Refusal<'a> {
    Refusal { code, expr }
}

/// What a parse stack entry is, as far as the checks need to know.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// An open `(`: whether it captures, and the case folding to restore at its `)`.
    Paren { capture: bool, fold: bool },
    /// A `|` waiting for its right-hand side.
    Bar,
    /// A literal string of `runes` runes; Go merges neighbours with the same case folding.
    Literal { runes: i64, fold: bool },
    /// A character class, `.`, `\d`, `\pL`: what Go merges across `|`.
    Class,
    /// The empty string, as in `()` or `a|`.
    Empty,
    /// `x{n,m}`, with the count Go's size check multiplies into its running product.
    Repeat(i64),
    /// A concatenation, with the height of its tallest piece.
    Concat(u32),
    /// An alternation of `branches` branches, with the height of its tallest branch.
    Alternate { branches: i64, tallest: u32 },
    /// Anything else: anchors, `*`, `+`, `?`, captures.
    Other,
}

/// A parse stack entry: a finished piece of the pattern, or a pseudo entry for `(` and `|`.
#[derive(Clone, Copy, Debug)]
struct Node {
    kind: Kind,
    /// The height of Go's tree for it.
    height: u32,
    /// Its compiled size as Go's `calcSize` counts it.
    size: i64,
    /// The largest product of nested repeat counts along a path of it, as Go's `repeatIsValid` walks it
    /// (capped just past [`MAX_REPEAT`]).
    product: i64,
}

impl Node {
    const fn leaf(kind: Kind) -> Node {
        Node { kind, height: 1, size: 1, product: 1 }
    }

    const fn literal(fold: bool) -> Node {
        Node::leaf(Kind::Literal { runes: 1, fold })
    }

    /// A node with one child, `sub`.
    fn over(sub: Node, kind: Kind, size: i64, product: i64) -> Node {
        Node { kind, height: sub.height.saturating_add(1), size: size.max(1), product }
    }

    const fn is_pseudo(&self) -> bool {
        matches!(self.kind, Kind::Paren { .. } | Kind::Bar)
    }

    /// Go's `isCharClass`: a single-rune literal or a class.
    const fn is_char_class(&self) -> bool {
        matches!(self.kind, Kind::Class | Kind::Literal { runes: 1, .. })
    }
}

/// A repetition operator.
#[derive(Clone, Copy)]
enum Rep {
    Star,
    Plus,
    Quest,
    /// `{min,max}`, max -1 for `{min,}`.
    Count(i64, i64),
}

struct Parser<'a> {
    whole: &'a str,
    stack: Vec<Node>,
    /// The `i` flag (case folding): it decides which literals merge.
    fold: bool,
    /// Nodes in use and the most ever in use: Go's `numRegexp`, which gates its size check.
    live: i64,
    allocated: i64,
    /// Go's `repeats`: the product of the counts of every repeat it has checked, up to [`MAX_SIZE`].
    repeats: i64,
    /// Whether Go has started checking sizes (it starts once `numRegexp * repeats` reaches MAX_SIZE).
    sizing: bool,
    /// Where the last `:]` of the pattern starts, so that a `[:` without one is not searched again.
    last_posix_close: Option<usize>,
}

impl<'a> Parser<'a> {
    fn new(whole: &'a str) -> Self {
        Parser {
            whole,
            stack: Vec::new(),
            fold: false,
            live: 0,
            allocated: 0,
            repeats: 1,
            sizing: false,
            last_posix_close: whole.rfind(":]"),
        }
    }

    fn parse(mut self) -> Parsed<'a, ()> {
        let whole = self.whole;
        let b = whole.as_bytes();
        let mut i = 0;
        // Where the repetition operator just before starts, if the last thing parsed was one.
        let mut last_repeat = None;
        while i < b.len() {
            let mut repeat = None;
            let one = move |result: Parsed<'a, ()>| result.map(|()| i + 1);
            i = match b[i] {
                b'(' if b.get(i + 1) == Some(&b'?') => self.perl_flags(i)?,
                b'(' => one(self.push_new(Node::leaf(Kind::Paren { capture: true, fold: self.fold })))?,
                b'|' => one(self.vertical_bar())?,
                b')' => one(self.right_paren())?,
                b'^' | b'$' => one(self.push_new(Node::leaf(Kind::Other)))?,
                b'.' => one(self.push_new(Node::leaf(Kind::Class)))?,
                b'[' => self.class(i)?,
                b'*' | b'+' | b'?' => {
                    repeat = Some(i);
                    let op = match b[i] {
                        b'*' => Rep::Star,
                        b'+' => Rep::Plus,
                        _ => Rep::Quest,
                    };
                    self.repeat(op, i, i + 1, last_repeat)?
                }
                b'{' => match parse_repeat(b, i) {
                    // Not of the form {n}, {n,} or {n,m}: a literal `{`.
                    None => one(self.literal())?,
                    Some((min, max, after)) => {
                        if !(0..=MAX_REPEAT).contains(&min) || max > MAX_REPEAT || (max >= 0 && min > max) {
                            return Err(refuse(INVALID_REPEAT_SIZE, &whole[i..after]));
                        }
                        repeat = Some(i);
                        self.repeat(Rep::Count(min, max), i, after, last_repeat)?
                    }
                },
                b'\\' => self.backslash(i)?,
                _ => {
                    self.literal()?;
                    i + whole[i..].chars().next().map_or(1, char::len_utf8)
                }
            };
            last_repeat = repeat;
        }
        self.concat()?;
        if self.swap_vertical_bar() {
            self.stack.pop();
        }
        self.alternate()?;
        if self.stack.len() != 1 {
            return Err(refuse(MISSING_PAREN, whole));
        }
        Ok(())
    }

    fn alloc(&mut self) {
        self.live += 1;
        self.allocated = self.allocated.max(self.live);
    }

    fn free(&mut self, n: i64) {
        self.live -= n;
    }

    /// Pushes a new node.
    fn push_new(&mut self, node: Node) -> Parsed<'a, ()> {
        self.alloc();
        self.push(node)
    }

    /// Go's `push`: merges the two literals under the new top, pushes, checks the limits.
    fn push(&mut self, node: Node) -> Parsed<'a, ()> {
        self.merge_literals();
        self.stack.push(node);
        self.check_limits(node)
    }

    fn literal(&mut self) -> Parsed<'a, ()> {
        self.push_new(Node::literal(self.fold))
    }

    /// Go's `maybeConcat`: the two top entries, if both literals with the same case folding, become one.
    fn merge_literals(&mut self) {
        let n = self.stack.len();
        if n < 2 {
            return;
        }
        if let (Kind::Literal { runes: a, fold }, Kind::Literal { runes: b, fold: fold_b }) =
            (self.stack[n - 2].kind, self.stack[n - 1].kind)
            && fold == fold_b
        {
            self.stack.pop();
            let runes = a.saturating_add(b);
            self.stack[n - 2] = Node { kind: Kind::Literal { runes, fold }, size: runes, ..self.stack[n - 2] };
            self.free(1);
        }
    }

    /// Go's `checkLimits`, less its rune count: the size (once Go tracks it), then the height.
    fn check_limits(&mut self, node: Node) -> Parsed<'a, ()> {
        if !self.sizing {
            if let Kind::Repeat(count) = node.kind {
                self.repeats = if count > MAX_SIZE / self.repeats { MAX_SIZE } else { self.repeats * count };
            }
            if self.allocated >= MAX_SIZE / self.repeats {
                self.sizing = true;
                if self.stack.iter().any(|n| n.size > MAX_SIZE) {
                    return Err(refuse(LARGE, self.whole));
                }
            }
        }
        if self.sizing && node.size > MAX_SIZE {
            return Err(refuse(LARGE, self.whole));
        }
        if node.height > MAX_HEIGHT {
            return Err(refuse(NESTING_DEPTH, self.whole));
        }
        Ok(())
    }

    /// Go's `repeat`: applies `op`, which starts at `start` and ends at `after`, to the top entry.
    /// `last` is where the repetition operator just before starts, if the previous token was one.
    fn repeat(&mut self, op: Rep, start: usize, mut after: usize, last: Option<usize>) -> Parsed<'a, usize> {
        let whole = self.whole;
        if whole.as_bytes().get(after) == Some(&b'?') {
            after += 1; // non-greedy
        }
        if let Some(last) = last {
            return Err(refuse(INVALID_REPEAT_OP, &whole[last..after]));
        }
        let sub = match self.stack.last() {
            Some(top) if !top.is_pseudo() => *top,
            _ => return Err(refuse(MISSING_REPEAT_ARGUMENT, &whole[start..after])),
        };
        let node = match op {
            Rep::Star => Node::over(sub, Kind::Other, sub.size.saturating_add(2), sub.product),
            Rep::Plus | Rep::Quest => Node::over(sub, Kind::Other, sub.size.saturating_add(1), sub.product),
            Rep::Count(min, max) => {
                let size = match (min, max) {
                    (0, -1) => sub.size.saturating_add(2),
                    (_, -1) => min.saturating_mul(sub.size).saturating_add(1),
                    _ => max.saturating_mul(sub.size).saturating_add(max - min),
                };
                let count = if max == -1 { min } else { max };
                // x{0} is valid whatever x holds; x{0,} counts once.
                let product = if max == 0 { 1 } else { (count.max(1) * sub.product).min(MAX_REPEAT + 1) };
                Node::over(sub, Kind::Repeat(count.max(1)), size, product)
            }
        };
        self.alloc();
        let top = self.stack.len() - 1;
        self.stack[top] = node;
        self.check_limits(node)?;
        if let Rep::Count(min, max) = op
            && (min >= 2 || max >= 2)
            && node.product > MAX_REPEAT
        {
            return Err(refuse(INVALID_REPEAT_SIZE, &whole[start..after]));
        }
        Ok(after)
    }

    /// Where the entries above the topmost pseudo entry start.
    fn above_pseudo(&self) -> usize {
        self.stack.iter().rposition(Node::is_pseudo).map_or(0, |p| p + 1)
    }

    /// Go's `concat`: the entries above the topmost `(` or `|` become one concatenation.
    fn concat(&mut self) -> Parsed<'a, ()> {
        self.merge_literals();
        let start = self.above_pseudo();
        match self.stack.len() - start {
            0 => return self.push_new(Node::leaf(Kind::Empty)),
            1 => {
                let only = self.stack.pop().expect("one entry above the pseudo entry");
                return self.push(only);
            }
            _ => {}
        }
        let (mut tallest, mut size, mut product, mut flattened) = (0, 0_i64, 1, 0);
        for piece in self.stack.drain(start..) {
            match piece.kind {
                // Go hoists the pieces of a concatenation inside a concatenation.
                Kind::Concat(t) => {
                    tallest = tallest.max(t);
                    flattened += 1;
                }
                _ => tallest = tallest.max(piece.height),
            }
            size = size.saturating_add(piece.size);
            product = product.max(piece.product);
        }
        self.free(flattened);
        self.push_new(Node { kind: Kind::Concat(tallest), height: tallest + 1, size: size.max(1), product })
    }

    /// Go's `alternate`: the entries above the topmost `(` become one alternation.
    fn alternate(&mut self) -> Parsed<'a, ()> {
        let start = self.above_pseudo();
        match self.stack.len() - start {
            // Go's NoMatch; the parser never gets here with nothing to alternate.
            0 => return self.push_new(Node::leaf(Kind::Other)),
            1 => {
                let only = self.stack.pop().expect("one entry above the pseudo entry");
                return self.push(only);
            }
            _ => {}
        }
        let branches: Vec<Node> = self.stack.drain(start..).collect();
        let node = self.collapse_alternation(branches);
        self.push(node)
    }

    /// Go's `collapse` for an alternation of two or more branches, with the parts of its `factor` that
    /// merge neighbouring single-character branches into a class and neighbouring empty branches into one.
    fn collapse_alternation(&mut self, branches: Vec<Node>) -> Node {
        self.alloc();
        let mut out: Vec<Node> = Vec::with_capacity(branches.len());
        let mut merged = 0;
        for branch in branches {
            match out.last_mut() {
                Some(prev) if prev.is_char_class() && branch.is_char_class() => {
                    *prev = Node::leaf(Kind::Class);
                    merged += 1;
                }
                Some(prev) if prev.kind == Kind::Empty && branch.kind == Kind::Empty => merged += 1,
                _ => out.push(branch),
            }
        }
        self.free(merged);
        let (mut count, mut tallest, mut size, mut product) = (0_i64, 0, 0_i64, 1);
        for branch in &out {
            match branch.kind {
                // An alternation inside an alternation: Go hoists its branches.
                Kind::Alternate { branches: k, tallest: t } => {
                    count += k;
                    tallest = tallest.max(t);
                    size = size.saturating_add(branch.size - (k - 1));
                }
                _ => {
                    count += 1;
                    tallest = tallest.max(branch.height);
                    size = size.saturating_add(branch.size);
                }
            }
            product = product.max(branch.product);
        }
        if count == 1 {
            self.free(1);
            return out[0];
        }
        let size = size.saturating_add(count - 1);
        Node { kind: Kind::Alternate { branches: count, tallest }, height: tallest + 1, size: size.max(1), product }
    }

    /// Go's `swapVerticalBar`: if the top entry sits on a `|`, it moves under the `|` (merged into the
    /// branch there when both are single characters). Reports whether it did.
    fn swap_vertical_bar(&mut self) -> bool {
        let n = self.stack.len();
        if n >= 3
            && self.stack[n - 2].kind == Kind::Bar
            && self.stack[n - 1].is_char_class()
            && self.stack[n - 3].is_char_class()
        {
            self.stack[n - 3] = Node::leaf(Kind::Class);
            self.stack.pop();
            self.free(1);
            return true;
        }
        if n >= 2 && self.stack[n - 2].kind == Kind::Bar {
            self.stack.swap(n - 1, n - 2);
            return true;
        }
        false
    }

    /// Go's `parseVerticalBar`.
    fn vertical_bar(&mut self) -> Parsed<'a, ()> {
        self.concat()?;
        if !self.swap_vertical_bar() {
            self.push_new(Node::leaf(Kind::Bar))?;
        }
        Ok(())
    }

    /// Go's `parseRightParen`.
    fn right_paren(&mut self) -> Parsed<'a, ()> {
        self.concat()?;
        if self.swap_vertical_bar() {
            self.stack.pop();
        }
        self.alternate()?;
        let whole = self.whole;
        if self.stack.len() < 2 {
            return Err(refuse(UNEXPECTED_PAREN, whole));
        }
        let inner = self.stack.pop().expect("two entries");
        let paren = self.stack.pop().expect("two entries");
        let Kind::Paren { capture, fold } = paren.kind else {
            return Err(refuse(UNEXPECTED_PAREN, whole));
        };
        self.fold = fold;
        if capture {
            self.push(Node::over(inner, Kind::Other, inner.size.saturating_add(2), inner.product))
        } else {
            self.push(inner)
        }
    }

    /// Go's `parsePerlFlags`, for the `(?` at `start`: a named capture, a non-capturing group with flags,
    /// or flags alone. Returns where parsing goes on.
    fn perl_flags(&mut self, start: usize) -> Parsed<'a, usize> {
        let whole = self.whole;
        let t = &whole[start..];
        let tb = t.as_bytes();
        let name_at = if tb.len() > 4 && tb[2] == b'P' && tb[3] == b'<' {
            Some(4) // (?P<name>
        } else if tb.len() > 3 && tb[2] == b'<' {
            Some(3) // (?<name>
        } else {
            None
        };
        if let Some(name_at) = name_at {
            let Some(end) = t.find('>') else {
                return Err(refuse(INVALID_NAMED_CAPTURE, t));
            };
            let name = &t[name_at..end];
            // Go accepts [A-Za-z0-9_]+ and does not look for duplicate names.
            if name.is_empty() || !name.bytes().all(|c| c == b'_' || c.is_ascii_alphanumeric()) {
                return Err(refuse(INVALID_NAMED_CAPTURE, &t[..=end]));
            }
            self.push_new(Node::leaf(Kind::Paren { capture: true, fold: self.fold }))?;
            return Ok(start + end + 1);
        }
        let mut j = start + 2;
        let (mut fold, mut negated, mut saw_flag) = (self.fold, false, false);
        while let Some(c) = whole[j..].chars().next() {
            j += c.len_utf8();
            match c {
                'i' => {
                    fold = !negated;
                    saw_flag = true;
                }
                'm' | 's' | 'U' => saw_flag = true,
                '-' if !negated => {
                    negated = true;
                    saw_flag = false;
                }
                ':' | ')' if !negated || saw_flag => {
                    if c == ':' {
                        self.push_new(Node::leaf(Kind::Paren { capture: false, fold: self.fold }))?;
                    }
                    self.fold = fold;
                    return Ok(j);
                }
                _ => break,
            }
        }
        Err(refuse(INVALID_PERL_OP, &whole[start..j]))
    }

    /// A backslash at `i` outside a class. Returns where parsing goes on.
    fn backslash(&mut self, i: usize) -> Parsed<'a, usize> {
        let whole = self.whole;
        match whole.as_bytes().get(i + 1) {
            Some(b'A' | b'z' | b'b' | b'B') => {
                self.push_new(Node::leaf(Kind::Other))?;
                return Ok(i + 2);
            }
            // Any byte: Go does not support it.
            Some(b'C') => return Err(refuse(INVALID_ESCAPE, &whole[i..i + 2])),
            // \Q...\E quotes literally; without \E it runs to the end; \Q\E alone is nothing.
            Some(b'Q') => {
                let rest = &whole[i + 2..];
                let (quoted, after) = match rest.find("\\E") {
                    Some(e) => (&rest[..e], i + 2 + e + 2),
                    None => (rest, whole.len()),
                };
                for _ in quoted.chars() {
                    self.literal()?;
                }
                return Ok(after);
            }
            _ => {}
        }
        if let Some(after) = self.unicode_class(i)? {
            self.push_new(Node::leaf(Kind::Class))?;
            return Ok(after);
        }
        if is_perl_class(&whole[i..]) {
            self.push_new(Node::leaf(Kind::Class))?;
            return Ok(i + 2);
        }
        let (_, after) = escape(whole, i)?;
        self.literal()?;
        Ok(after)
    }

    /// Go's `parseUnicodeClass` at `j`: `\pN`, `\p{Name}`, `\PN`, `\P{Name}`, `\p{^Name}`. None if
    /// there is none at `j`, else where it ends.
    fn unicode_class(&self, j: usize) -> Parsed<'a, Option<usize>> {
        let whole = self.whole;
        let s = &whole[j..];
        if !(s.starts_with("\\p") || s.starts_with("\\P")) {
            return Ok(None);
        }
        let (end, name) = match s[2..].chars().next() {
            Some('{') => match s.find('}') {
                Some(e) => (e + 1, &s[3..e]),
                None => return Err(refuse(INVALID_CHAR_RANGE, s)),
            },
            // A one-letter name; `\p` at the very end has the empty name.
            c => {
                let end = 2 + c.map_or(0, char::len_utf8);
                (end, &s[2..end])
            }
        };
        let name = name.strip_prefix('^').unwrap_or(name);
        if !is_unicode_class(name) {
            return Err(refuse(INVALID_CHAR_RANGE, &s[..end]));
        }
        Ok(Some(j + end))
    }

    /// Go's `parseClass` for the `[` at `start`. Returns where parsing goes on.
    fn class(&mut self, start: usize) -> Parsed<'a, usize> {
        let whole = self.whole;
        let b = whole.as_bytes();
        let mut j = start + 1;
        if b.get(j) == Some(&b'^') {
            j += 1;
        }
        // `]` right after `[` or `[^` is a literal.
        let mut first = true;
        loop {
            if b.get(j) == Some(&b']') && !first {
                break;
            }
            first = false;
            let rest = &whole[j..];
            // [:alpha:]; the search for `:]` is skipped where no `:]` follows, which keeps this linear.
            if rest.len() > 2
                && rest.starts_with("[:")
                && self.last_posix_close.is_some_and(|p| p >= j + 2)
                && let Some(k) = rest[2..].find(":]")
            {
                let name = &rest[..k + 4];
                let inner = &name[2..k + 2];
                if !POSIX_CLASSES.contains(&inner.strip_prefix('^').unwrap_or(inner)) {
                    return Err(refuse(INVALID_CHAR_RANGE, name));
                }
                j += k + 4;
                continue;
            }
            if let Some(after) = self.unicode_class(j)? {
                j = after;
                continue;
            }
            if is_perl_class(rest) {
                j += 2;
                continue;
            }
            let lo_at = j;
            let (lo, next) = class_char(whole, j, start)?;
            j = next;
            // [a-] is a and -.
            if b.get(j) == Some(&b'-') && b.get(j + 1).is_some_and(|&c| c != b']') {
                let (hi, next) = class_char(whole, j + 1, start)?;
                j = next;
                if hi < lo {
                    return Err(refuse(INVALID_CHAR_RANGE, &whole[lo_at..j]));
                }
            }
        }
        self.push_new(Node::leaf(Kind::Class))?;
        Ok(j + 1)
    }
}

/// Go's `parseClassChar`: one character of a class at `j` (of the class starting at `class_start`).
fn class_char(whole: &str, j: usize, class_start: usize) -> Parsed<'_, (u32, usize)> {
    match whole[j..].chars().next() {
        None => Err(refuse(MISSING_BRACKET, &whole[class_start..])),
        Some('\\') => escape(whole, j),
        Some(c) => Ok((u32::from(c), j + c.len_utf8())),
    }
}

/// Go's `parseEscape` for the backslash at `j`: the rune it stands for and where it ends.
fn escape(whole: &str, j: usize) -> Parsed<'_, (u32, usize)> {
    let b = whole.as_bytes();
    let Some(c) = whole[j + 1..].chars().next() else {
        return Err(refuse(TRAILING_BACKSLASH, ""));
    };
    let mut k = j + 1 + c.len_utf8();
    let octal = |k: usize| b.get(k).copied().filter(|d| (b'0'..=b'7').contains(d)).map(|d| u32::from(d - b'0'));
    match c {
        // \1 to \7 alone would be backreferences, which Go does not support; with another octal
        // digit after them they are octal, like \0.
        '1'..='7' if octal(k).is_none() => {}
        '0'..='7' => {
            let mut r = u32::from(c) - u32::from('0');
            for _ in 1..3 {
                let Some(d) = octal(k) else { break };
                r = r * 8 + d;
                k += 1;
            }
            return Ok((r, k));
        }
        'x' => {
            let Some(c2) = whole[k..].chars().next() else {
                return Err(refuse(INVALID_ESCAPE, &whole[j..k]));
            };
            k += c2.len_utf8();
            if c2 == '{' {
                // \x{10FFFF}: one hex digit or more, up to the largest rune.
                let (mut r, mut digits) = (0_u32, 0);
                while let Some(d) = whole[k..].chars().next() {
                    k += d.len_utf8();
                    if d == '}' {
                        if digits == 0 {
                            break;
                        }
                        return Ok((r, k));
                    }
                    let Some(v) = d.to_digit(16) else { break };
                    r = r * 16 + v;
                    if r > 0x10_FFFF {
                        break;
                    }
                    digits += 1;
                }
            } else {
                // \x7F: exactly two hex digits.
                let c3 = whole[k..].chars().next();
                k += c3.map_or(0, char::len_utf8);
                if let (Some(x), Some(y)) = (c2.to_digit(16), c3.and_then(|c| c.to_digit(16))) {
                    return Ok((x * 16 + y, k));
                }
            }
        }
        // C escapes (no \b: that is a word boundary, and refused in a class).
        'a' | 'f' | 'n' | 'r' | 't' | 'v' => {
            let r = match c {
                'a' => 7,
                'f' => 12,
                'n' => 10,
                'r' => 13,
                't' => 9,
                _ => 11,
            };
            return Ok((r, k));
        }
        // Escaped ASCII punctuation (and space, and `_`) stands for itself; escaped letters, digits and
        // non-ASCII runes other than the above are refused.
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => return Ok((u32::from(c), k)),
        _ => {}
    }
    Err(refuse(INVALID_ESCAPE, &whole[j..k]))
}

/// Whether `s` starts with one of Go's Perl classes: `\d`, `\s`, `\w` and their negations.
fn is_perl_class(s: &str) -> bool {
    matches!(s.as_bytes(), [b'\\', b'd' | b'D' | b's' | b'S' | b'w' | b'W', ..])
}

/// Go's `parseRepeat` at the `{` at `i`: `{n}`, `{n,}` (max -1) or `{n,m}` and where it ends; None if
/// the text is not of that form (then `{` is a literal). A number too large to read gives min -1.
fn parse_repeat(b: &[u8], i: usize) -> Option<(i64, i64, usize)> {
    let (mut min, mut j) = parse_int(b, i + 1)?;
    let max = match *b.get(j)? {
        b',' => {
            j += 1;
            if *b.get(j)? == b'}' {
                -1
            } else {
                let (max, next) = parse_int(b, j)?;
                j = next;
                if max < 0 {
                    min = -1;
                }
                max
            }
        }
        _ => min,
    };
    (b.get(j) == Some(&b'}')).then_some((min, max, j + 1))
}

/// Go's `parseInt`: a decimal number without leading zeros at `j`, -1 if at least 10^8.
fn parse_int(b: &[u8], j: usize) -> Option<(i64, usize)> {
    let digits = b.get(j..)?.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 || (digits >= 2 && b[j] == b'0') {
        return None;
    }
    let mut n = 0_i64;
    for &d in &b[j..j + digits] {
        if n >= 100_000_000 {
            n = -1;
            break;
        }
        n = n * 10 + i64::from(d - b'0');
    }
    Some((n, j + digits))
}

/// Whether Go knows the class name of `\p{name}`: compared as Go's `canonicalName` writes it (no `_`,
/// `-` or space, the first letter upper case and the rest lower case, ASCII only).
fn is_unicode_class(name: &str) -> bool {
    let mut canonical = Vec::with_capacity(name.len());
    for c in name.bytes() {
        match c {
            b'_' | b'-' | b' ' => {}
            c if canonical.is_empty() => canonical.push(c.to_ascii_uppercase()),
            c => canonical.push(c.to_ascii_lowercase()),
        }
    }
    UNICODE_CLASSES.binary_search_by(|n| n.as_bytes().cmp(&canonical)).is_ok()
}

/// The `\p{...}` names Go's regexp accepts, written as its `canonicalName` makes them and sorted: `Any`,
/// `Assigned`, `ASCII`; the keys of Go's `unicode.Categories` (Unicode 15.0.0, with `Cn` and `LC`) and
/// `unicode.Scripts` (163 scripts: `Old_Italic` is `Olditalic`); and the keys of `unicode.CategoryAliases`
/// (`Letter`, `Uppercase_Letter`, `digit`, `punct`, `cntrl`, ...).
#[rustfmt::skip]
static UNICODE_CLASSES: &[&str] = &[
    "Adlam", "Ahom", "Anatolianhieroglyphs", "Any", "Arabic", "Armenian", "Ascii", "Assigned", "Avestan", "Balinese",
    "Bamum", "Bassavah", "Batak", "Bengali", "Bhaiksuki", "Bopomofo", "Brahmi", "Braille", "Buginese", "Buhid", "C",
    "Canadianaboriginal", "Carian", "Casedletter", "Caucasianalbanian", "Cc", "Cf", "Chakma", "Cham", "Cherokee",
    "Chorasmian", "Closepunctuation", "Cn", "Cntrl", "Co", "Combiningmark", "Common", "Connectorpunctuation",
    "Control", "Coptic", "Cs", "Cuneiform", "Currencysymbol", "Cypriot", "Cyprominoan", "Cyrillic", "Dashpunctuation",
    "Decimalnumber", "Deseret", "Devanagari", "Digit", "Divesakuru", "Dogra", "Duployan", "Egyptianhieroglyphs",
    "Elbasan", "Elymaic", "Enclosingmark", "Ethiopic", "Finalpunctuation", "Format", "Georgian", "Glagolitic",
    "Gothic", "Grantha", "Greek", "Gujarati", "Gunjalagondi", "Gurmukhi", "Han", "Hangul", "Hanifirohingya",
    "Hanunoo", "Hatran", "Hebrew", "Hiragana", "Imperialaramaic", "Inherited", "Initialpunctuation",
    "Inscriptionalpahlavi", "Inscriptionalparthian", "Javanese", "Kaithi", "Kannada", "Katakana", "Kawi", "Kayahli",
    "Kharoshthi", "Khitansmallscript", "Khmer", "Khojki", "Khudawadi", "L", "Lao", "Latin", "Lc", "Lepcha", "Letter",
    "Letternumber", "Limbu", "Lineara", "Linearb", "Lineseparator", "Lisu", "Ll", "Lm", "Lo", "Lowercaseletter", "Lt",
    "Lu", "Lycian", "Lydian", "M", "Mahajani", "Makasar", "Malayalam", "Mandaic", "Manichaean", "Marchen", "Mark",
    "Masaramgondi", "Mathsymbol", "Mc", "Me", "Medefaidrin", "Meeteimayek", "Mendekikakui", "Meroiticcursive",
    "Meroitichieroglyphs", "Miao", "Mn", "Modi", "Modifierletter", "Modifiersymbol", "Mongolian", "Mro", "Multani",
    "Myanmar", "N", "Nabataean", "Nagmundari", "Nandinagari", "Nd", "Newa", "Newtailue", "Nko", "Nl", "No",
    "Nonspacingmark", "Number", "Nushu", "Nyiakengpuachuehmong", "Ogham", "Olchiki", "Oldhungarian", "Olditalic",
    "Oldnortharabian", "Oldpermic", "Oldpersian", "Oldsogdian", "Oldsoutharabian", "Oldturkic", "Olduyghur",
    "Openpunctuation", "Oriya", "Osage", "Osmanya", "Other", "Otherletter", "Othernumber", "Otherpunctuation",
    "Othersymbol", "P", "Pahawhhmong", "Palmyrene", "Paragraphseparator", "Paucinhau", "Pc", "Pd", "Pe", "Pf",
    "Phagspa", "Phoenician", "Pi", "Po", "Privateuse", "Ps", "Psalterpahlavi", "Punct", "Punctuation", "Rejang",
    "Runic", "S", "Samaritan", "Saurashtra", "Sc", "Separator", "Sharada", "Shavian", "Siddham", "Signwriting",
    "Sinhala", "Sk", "Sm", "So", "Sogdian", "Sorasompeng", "Soyombo", "Spaceseparator", "Spacingmark", "Sundanese",
    "Surrogate", "Sylotinagri", "Symbol", "Syriac", "Tagalog", "Tagbanwa", "Taile", "Taitham", "Taiviet", "Takri",
    "Tamil", "Tangsa", "Tangut", "Telugu", "Thaana", "Thai", "Tibetan", "Tifinagh", "Tirhuta", "Titlecaseletter",
    "Toto", "Ugaritic", "Unassigned", "Uppercaseletter", "Vai", "Vithkuqi", "Wancho", "Warangciti", "Yezidi", "Yi",
    "Z", "Zanabazarsquare", "Zl", "Zp", "Zs",
];

/// `regexp.QuoteMeta`: `s` matched literally in an RE2 pattern.
pub fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn refused(pattern: &str, code: &str, expr: &str) {
        assert_eq!(check(pattern), Err(format!("error parsing regexp: {code}: `{expr}`")), "pattern {pattern:?}");
    }

    #[track_caller]
    fn accepted(pattern: &str) {
        assert_eq!(check(pattern), Ok(()), "pattern {pattern:?}");
    }

    /// Go's regexp/syntax parse_test.go `parseTests` (the patterns): all parse.
    #[rustfmt::skip]
    const GO_PARSE_TESTS: &[&str] = &[
            "a", "a.", "a.b", "ab", "a.b.c", "abc", "a|^", "a|b", "(a)", "(a)|b", "a*", "a+", "a?", "a{2}", "a{2,3}",
            "a{2,}", "a*?", "a+?", "a??", "a{2}?", "a{2,3}?", "a{2,}?", "x{1001", "x{9876543210", "x{9876543210,",
            "x{2,1", "x{1,9876543210", "", "|", "|x|", ".", "^", "$", r"\|", r"\(", r"\)", r"\*", r"\+", r"\?", "{",
            "}", r"\.", r"\^", r"\$", r"\\", "[ace]", "[abc]", "[a-z]", "[a]", r"\-", "-", r"\_", "abc|def",
            "abc|def|ghi", "[[:lower:]]", "[^[:lower:]]", "[[:^lower:]]", "(?i)[[:lower:]]", "(?i)[a-z]", r"\d", r"\D",
            r"\s", r"\S", r"\w", r"\W", r"(?i)\w", r"[^\\]", r"\p{Braille}", r"\P{Braille}", r"\p{^Braille}",
            r"\P{^Braille}", r"\pZ", r"[\p{Braille}]", r"[\P{Braille}]", r"[\p{^Braille}]", r"[\P{^Braille}]",
            r"[\pZ]", r"\p{Lu}", r"\p{Uppercase_Letter}", r"\p{upper case-let ter}", r"\p{__upper case-let ter}",
            r"\p{Canadian_Aboriginal}", r"[\p{Lu}]", r"(?i)[\p{Lu}]", r"\p{Any}", r"\p{^Any}", r"(?i)\p{ascii}",
            r"\p{Assigned}", r"\p{^Assigned}", r"[\012-\234]\141", r"[\x{41}-\x7a]\x61", "a{,2}", r"\.\^\$\\",
            "[a-zABC]", "[^a]", "[α-ε☺]", "a*{", "(?:ab)*", "(ab)*", "ab|cd", "a(b|c)d", "(?:a)", "(?:ab)(?:cd)",
            "(?:a+b+)(?:c+d+)", "(?:a+|b+)|(?:c+|d+)", "(?:a|b)|(?:c|d)", "a|.", ".|a", "(?:[abc]|A|Z|hello|world)",
            "(?:[abc]|A|Z)", r"\Q+|*?{[\E", r"\Q+\E+", r"\Qab\E+", r"\Q\\E", r"\Q\\\E", "(?m)^", "(?m)$", "(?-m)^",
            "(?-m)$", r"(?m)\A", r"(?m)\z", r"(?-m)\A", r"(?-m)\z", "(?P<name>a)", "(?<name>a)", "[Aa]",
            r"[\x{100}\x{101}]", "[Δδ]", "abcde", "[Aa][Bb]cd", "abc|abd|aef|bcx|bcy", "ax+y|ax+z|ay+w", "(?:.)",
            "(?:x|(?:xa))", "(?:.|(?:.a))", "(?:A(?:A|a))", "(?:A|a)", "A|(?:A|a)", "(?s).", "(?-s).", "(?:(?:^).)",
            "(?-s)(?:(?:^).)", r"[\s\S]a", "a(?:b)c|abd", "abc|x|abd", "(?i)abc|ABD", "[ab]c|[ab]d", ".c|.d",
            "x{2}|x{2}[0-9]", "x{2}y|x{2}[0-9]y", "a.*?c|a.*?b", "((((((((((x{2}){2}){2}){2}){2}){2}){2}){2}){2}))",
            "((((((((((x{1}){2}){2}){2}){2}){2}){2}){2}){2}){2})", "(?:[a-z]{4}){0,250}",
    ];

    #[test]
    fn go_parse_tests() {
        for p in GO_PARSE_TESTS {
            accepted(p);
        }
        // "Valid nesting".
        accepted(&format!("{}{}", "(".repeat(999), ")".repeat(999)));
        accepted(&format!("{}{}", "(?:".repeat(999), ")*".repeat(999)));
        accepted(&format!("({})", "|".repeat(12345)));
    }

    /// Go's `onlyPerl`: valid with the Perl flags regexp.Compile uses.
    #[test]
    fn go_only_perl() {
        for p in
            ["[a-b-c]", r"\Qabc\E", r"\Q*+?{[\E", r"\Q\\E", r"\Q\\\E", r"\Q\\\\E", r"\Q\\\\\E", "(?:a)", "(?P<name>a)"]
        {
            accepted(p);
        }
    }

    /// Go's `onlyPOSIX`: refused with the Perl flags.
    #[test]
    fn go_only_posix() {
        refused("a++", INVALID_REPEAT_OP, "++");
        refused("a**", INVALID_REPEAT_OP, "**");
        refused("a?*", INVALID_REPEAT_OP, "?*");
        refused("a+*", INVALID_REPEAT_OP, "+*");
        refused("a{1}*", INVALID_REPEAT_OP, "{1}*");
        refused(".{1}{2}.{3}", INVALID_REPEAT_OP, "{1}{2}");
    }

    /// Go's `invalidRegexps`, with the error Go's parser gives each. Left out: the four invalid UTF-8
    /// patterns (a `&str` cannot hold them) and `\pL` 27,000 times (Go's rune count limit, not checked).
    #[test]
    fn go_invalid_regexps() {
        for p in ["(", "(a", "(a|b|", "(a|b", "(?P<name>a", "(?P<name>", "(?<name>a", "(?<name>"] {
            refused(p, MISSING_PAREN, p);
        }
        for p in [")", "a)", "(a))", "a|b|)", "(a|b|))", "a|b)", "(a|b))", "([a-z]))"] {
            refused(p, UNEXPECTED_PAREN, p);
        }
        refused("[a-z", MISSING_BRACKET, "[a-z");
        refused("([a-z)", MISSING_BRACKET, "[a-z)");
        refused("[a-z)", MISSING_BRACKET, "[a-z)");
        refused("x{1001}", INVALID_REPEAT_SIZE, "{1001}");
        refused("x{9876543210}", INVALID_REPEAT_SIZE, "{9876543210}");
        refused("x{2,1}", INVALID_REPEAT_SIZE, "{2,1}");
        refused("x{1,9876543210}", INVALID_REPEAT_SIZE, "{1,9876543210}");
        refused("(?P<name", INVALID_NAMED_CAPTURE, "(?P<name");
        refused("(?P<x y>a)", INVALID_NAMED_CAPTURE, "(?P<x y>");
        refused("(?P<>a)", INVALID_NAMED_CAPTURE, "(?P<>");
        refused("(?<name", INVALID_NAMED_CAPTURE, "(?<name");
        refused("(?<x y>a)", INVALID_NAMED_CAPTURE, "(?<x y>");
        refused("(?<>a)", INVALID_NAMED_CAPTURE, "(?<>");
        refused("[a-Z]", INVALID_CHAR_RANGE, "a-Z");
        refused("(?i)[a-Z]", INVALID_CHAR_RANGE, "a-Z");
        refused(r"\Q\E*", MISSING_REPEAT_ARGUMENT, "*");
        refused("a{100000}", INVALID_REPEAT_SIZE, "{100000}");
        refused("a{100000,}", INVALID_REPEAT_SIZE, "{100000,}");
        refused("((((((((((x{2}){2}){2}){2}){2}){2}){2}){2}){2}){2})", INVALID_REPEAT_SIZE, "{2}");
        refused("(?:[a-z]{4}){0,251}", INVALID_REPEAT_SIZE, "{0,251}");
        let deep = format!("{}{}", "(".repeat(1000), ")".repeat(1000));
        refused(&deep, NESTING_DEPTH, &deep);
        let deep = format!("{}{}", "(?:".repeat(1000), ")*".repeat(1000));
        refused(&deep, NESTING_DEPTH, &deep);
        let long = format!("({}){{1000}}", "(xx?)".repeat(1000));
        refused(&long, LARGE, &long);
        let long = "(xx?){1000}".repeat(1000);
        refused(&long, LARGE, &long);
    }

    /// The security probe's patterns.
    #[test]
    fn probe_refusals() {
        refused("a{2000}", INVALID_REPEAT_SIZE, "{2000}");
        refused("a{1001}", INVALID_REPEAT_SIZE, "{1001}");
        refused(r"\8", INVALID_ESCAPE, r"\8");
        refused("[[:foo:]]", INVALID_CHAR_RANGE, "[:foo:]");
        refused("x**", INVALID_REPEAT_OP, "**");
        refused(r"\pX", INVALID_CHAR_RANGE, r"\pX");
        refused("a{2,1}", INVALID_REPEAT_SIZE, "{2,1}");
        refused("(?i", INVALID_PERL_OP, "(?i");
        assert_eq!(check("a{2000}"), Err("error parsing regexp: invalid repeat count: `{2000}`".to_owned()));
    }

    /// Patterns Go accepts: the probe's, and edge cases read off Go's parser.
    #[rustfmt::skip]
    const ACCEPTED: &[&str] = &[
            "^/api/v[0-9]+/.*$", "(?i)foo", "a{1000}", "a{2,}", "[[:alpha:]]", r"\pL", r"\p{Greek}", r"\PN",
            r"\p{^Greek}", "(?P<name>x)", "(?<name>x)", "x*?", r"\x{10FFFF}", r"\Aabc\z", r"[^\d\s]", r"\b", "a|b|",
            "()", "(?:a)", "(?s:.)", "(?U)a*", "[a-]", "[]a]", "[^]a]", r"\0", r"\012", r"\12", r"\08", "(?m)",
            "(?s)", "(?-i)", "(?i-s:x)", "(?i-i)", "(?)", "(?:)*", "^*", r"\b+", "a{0}", "(?:a{1000}){0}",
            "(?:a{1000}){1}", "(?:a{1000}){0,1}", "(?:a{1000})*", "(?:a{10}){100}", "a*{", r"a\Q\E*", "x(?i)*",
            r"[\d-z]", "[[:]", "[::]", r"\p{greek}", r"\p{Letter}", r"\p{Old_Italic}", r"\p{SignWriting}", r"\p{LC}",
            r"\p{Cn}", r"\pl", r"[\pL\p{Han}]",
    ];

    #[test]
    fn probe_acceptances() {
        for p in ACCEPTED {
            accepted(p);
        }
        // Go does not look for duplicate group names (SubexpIndex gives the leftmost).
        accepted("(?P<n>a)(?P<n>b)");
        accepted("(?<n>a)(?P<n>b)");
        // \Q needs no \E: it quotes to the end.
        accepted(r"\Q");
        accepted(r"\Qa*(");
        accepted(r"\Qa\E\Q");
    }

    #[test]
    fn more_refusals() {
        refused("a\\", TRAILING_BACKSLASH, "");
        assert_eq!(check("a\\"), Err("error parsing regexp: trailing backslash at end of expression: ``".to_owned()));
        refused(r"\C", INVALID_ESCAPE, r"\C");
        refused(r"\Z", INVALID_ESCAPE, r"\Z");
        refused(r"\1", INVALID_ESCAPE, r"\1");
        refused(r"\18", INVALID_ESCAPE, r"\1");
        refused(r"\é", INVALID_ESCAPE, r"\é");
        refused(r"[\b]", INVALID_ESCAPE, r"\b");
        refused(r"[a-\d]", INVALID_ESCAPE, r"\d");
        refused(r"[a-\pL]", INVALID_ESCAPE, r"\p");
        refused(r"\x{110000}", INVALID_ESCAPE, r"\x{110000");
        refused(r"\x{}", INVALID_ESCAPE, r"\x{}");
        refused(r"\x{41", INVALID_ESCAPE, r"\x{41");
        refused(r"\xg1", INVALID_ESCAPE, r"\xg1");
        refused(r"\x4", INVALID_ESCAPE, r"\x4");
        refused(r"\x", INVALID_ESCAPE, r"\x");
        refused(r"\p{Foo}", INVALID_CHAR_RANGE, r"\p{Foo}");
        refused(r"x\p{Greek", INVALID_CHAR_RANGE, r"\p{Greek");
        refused(r"\p", INVALID_CHAR_RANGE, r"\p");
        refused(r"\p{}", INVALID_CHAR_RANGE, r"\p{}");
        refused(r"\p{^}", INVALID_CHAR_RANGE, r"\p{^}");
        refused(r"\p^L", INVALID_CHAR_RANGE, r"\p^");
        refused(r"[\p{Foo}]", INVALID_CHAR_RANGE, r"\p{Foo}");
        refused("[[:^foo:]]", INVALID_CHAR_RANGE, "[:^foo:]");
        refused("[[::]]", INVALID_CHAR_RANGE, "[::]");
        refused("[]", MISSING_BRACKET, "[]");
        refused("x[^]", MISSING_BRACKET, "[^]");
        refused("[[:alpha:]", MISSING_BRACKET, "[[:alpha:]");
        refused("(?", INVALID_PERL_OP, "(?");
        refused("(?-)", INVALID_PERL_OP, "(?-)");
        refused("(?i-)", INVALID_PERL_OP, "(?i-)");
        refused("(?--i)", INVALID_PERL_OP, "(?--");
        refused("(?x)", INVALID_PERL_OP, "(?x");
        refused("(?P=n)", INVALID_PERL_OP, "(?P");
        refused("(?P<", INVALID_PERL_OP, "(?P");
        refused("(?#c)", INVALID_PERL_OP, "(?#");
        refused("(?=a)", INVALID_PERL_OP, "(?=");
        refused("(?<=a)b", INVALID_NAMED_CAPTURE, "(?<=a)b");
        refused("(?<=a)b>", INVALID_NAMED_CAPTURE, "(?<=a)b>");
        refused("(?P<é>a)", INVALID_NAMED_CAPTURE, "(?P<é>");
        refused("*", MISSING_REPEAT_ARGUMENT, "*");
        refused("a|*", MISSING_REPEAT_ARGUMENT, "*");
        refused("(*)", MISSING_REPEAT_ARGUMENT, "*");
        refused("(?i)*", MISSING_REPEAT_ARGUMENT, "*");
        refused("{2}", MISSING_REPEAT_ARGUMENT, "{2}");
        refused("??", MISSING_REPEAT_ARGUMENT, "??");
        refused("a*?+", INVALID_REPEAT_OP, "*?+");
        refused("a???", INVALID_REPEAT_OP, "???");
        refused("x{2}{3}", INVALID_REPEAT_OP, "{2}{3}");
        refused("a*{2000}", INVALID_REPEAT_SIZE, "{2000}");
        refused("(?:a{600}){2}", INVALID_REPEAT_SIZE, "{2}");
        refused("(?:a{600}){2}?", INVALID_REPEAT_SIZE, "{2}?");
        refused("(?:(?:a{600}){1}){2}", INVALID_REPEAT_SIZE, "{2}");
        refused("(?:a{500}|b{3}){3,}", INVALID_REPEAT_SIZE, "{3,}");
        refused("(?:(?:a{1000})*){2}", INVALID_REPEAT_SIZE, "{2}");
        refused("a{1000}*", INVALID_REPEAT_OP, "{1000}*");
        refused("a{1001,}", INVALID_REPEAT_SIZE, "{1001,}");
        refused("a{0,1001}", INVALID_REPEAT_SIZE, "{0,1001}");
        refused("a{1000,999}", INVALID_REPEAT_SIZE, "{1000,999}");
        // The first error Go meets wins.
        refused("x{2000}(", INVALID_REPEAT_SIZE, "{2000}");
        refused(")x{2000}", UNEXPECTED_PAREN, ")x{2000}");
    }

    /// Leading zeros and malformed counts make `{` a literal, as in Go.
    #[test]
    fn literal_braces() {
        for p in ["a{01}", "a{1,01}", "a{,1}", "a{", "a{1", "a{1,", "a{1,2", "{}", "a{x}"] {
            accepted(p);
        }
    }

    /// Adversarial shapes finish quickly and as Go finishes them.
    #[test]
    fn adversarial_inputs_are_linear() {
        let open = "(".repeat(200_000);
        refused(&open, MISSING_PAREN, &open);
        let deep = format!("{}a{}", "(".repeat(100_000), ")".repeat(100_000));
        refused(&deep, NESTING_DEPTH, &deep);
        accepted(&"a|".repeat(100_000));
        accepted(&"(?:a|b)*".repeat(20_000));
        let posix = "[[:".repeat(50_000);
        refused(&posix, MISSING_BRACKET, &posix);
        // The first `[:` finds the last `:]` and is refused at once, as in Go.
        let posix = format!("[{}]", "[:".repeat(50_000));
        refused(&posix, INVALID_CHAR_RANGE, &posix[1..]);
        let quoted = format!(r"\Q{}", "a*".repeat(100_000));
        accepted(&quoted);
        accepted(&"x{1000}".repeat(1000));
    }

    #[test]
    fn unicode_class_names_are_sorted_and_canonical() {
        assert!(UNICODE_CLASSES.windows(2).all(|w| w[0] < w[1]));
        for name in UNICODE_CLASSES {
            assert!(is_unicode_class(name), "{name}");
            let lower = name.to_ascii_lowercase();
            assert!(is_unicode_class(&lower), "{lower}");
        }
        assert_eq!(UNICODE_CLASSES.len(), 3 + 38 + 163 + 42);
    }
}
