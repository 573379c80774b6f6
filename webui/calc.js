// The calculator tool: exact arithmetic on fractions of BigInts, read by a small recursive-descent
// parser (never eval: the model's text is data). 0.1 + 0.2 is 3/10, 2^100 is every digit of it.
//
//   expr   := term (("+" | "-") term)*
//   term   := unary (("*" | "/" | "%") unary)*        (× and ÷ too; % is the remainder)
//   unary  := ("-" | "+") unary | power
//   power  := postfix ("^" unary)?                      (** too; right-associative: 2^3^2 = 2^9)
//   postfix:= atom "!"*                                 (factorial of a whole number up to 1000)
//   atom   := number | "(" expr ")" | "sqrt" "(" expr ")"
//
// A result is exact when it can be: a whole number, a fraction with its decimal expansion (ending,
// or the first 30 significant digits), or for sqrt of a number that is no perfect square, 30 digits.

const MAX_INPUT = 1000;
const MAX_DIGITS = 5000;       // a result longer than this is refused rather than written out
const MAX_EXPONENT = 10000;
const DECIMALS = 30;

export class CalcError extends Error {}

function gcd(a, b) {
  a = a < 0n ? -a : a;
  b = b < 0n ? -b : b;
  while (b) [a, b] = [b, a % b];
  return a;
}

/** A fraction n/d in lowest terms, d > 0. */
function frac(n, d = 1n) {
  if (d === 0n) throw new CalcError("division by zero");
  if (d < 0n) [n, d] = [-n, -d];
  const g = gcd(n, d) || 1n;
  const out = { n: n / g, d: d / g };
  if (out.n.toString().length + out.d.toString().length > MAX_DIGITS) throw new CalcError("the result has too many digits");
  return out;
}

const add = (a, b) => frac(a.n * b.d + b.n * a.d, a.d * b.d);
const sub = (a, b) => frac(a.n * b.d - b.n * a.d, a.d * b.d);
const mul = (a, b) => frac(a.n * b.n, a.d * b.d);
const div = (a, b) => frac(a.n * b.d, a.d * b.n);

function whole(a, what) {
  if (a.d !== 1n) throw new CalcError(what + " needs a whole number");
  return a.n;
}

function mod(a, b) {
  if (b.n === 0n) throw new CalcError("remainder of a division by zero");
  const q = (a.n * b.d) / (a.d * b.n);   // truncated toward zero, as JavaScript's % does
  return sub(a, mul(b, frac(q)));
}

function pow(a, b) {
  const e = whole(b, "a power");
  if (e > BigInt(MAX_EXPONENT) || e < -BigInt(MAX_EXPONENT)) throw new CalcError("the exponent is too large (at most " + MAX_EXPONENT + ")");
  const bits = Math.max(a.n.toString(2).length, a.d.toString(2).length);
  if (bits * Math.abs(Number(e)) > MAX_DIGITS * 3.33) throw new CalcError("the result has too many digits");
  if (e < 0n) return frac(a.d ** -e, a.n ** -e);
  return frac(a.n ** e, a.d ** e);
}

function factorial(a) {
  const n = whole(a, "a factorial");
  if (n < 0n || n > 1000n) throw new CalcError("factorial is for whole numbers from 0 to 1000");
  let r = 1n;
  for (let i = 2n; i <= n; i++) r *= i;
  return frac(r);
}

function isqrt(n) {
  if (n < 2n) return n;
  let x = BigInt(Math.floor(Math.sqrt(Number(n))));
  if (x === 0n) x = 1n;
  for (;;) {   // Newton's method on integers, from a float guess
    const y = (x + n / x) >> 1n;
    if (y >= x && x * x <= n && (x + 1n) * (x + 1n) > n) return x;
    x = y === x ? y - 1n : y;
  }
}

/** sqrt: exact for a perfect square (of a fraction), else DECIMALS digits, marked inexact. */
function sqrt(a, flags) {
  if (a.n < 0n) throw new CalcError("the square root of a negative number is not a real number");
  const rn = isqrt(a.n);
  const rd = isqrt(a.d);
  if (rn * rn === a.n && rd * rd === a.d) return frac(rn, rd);
  flags.inexact = true;
  const scale = 10n ** BigInt(DECIMALS + 2);
  return frac(isqrt((a.n * scale * scale) / a.d), scale);
}

function tokenize(text) {
  const tokens = [];
  text = text.replace(/(\d),(?=\d{3}(?!\d))/g, "$1");   // 1,000,000: thousands, never a decimal comma
  const re = /\s*(?:(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?|(\*\*|[-+*/%^()!×÷−])|([A-Za-z]+))/y;
  let at = 0;
  while (at < text.length) {
    re.lastIndex = at;
    const m = re.exec(text);
    if (!m || m[0].length === 0) {
      if (/^\s*$/.test(text.slice(at))) break;
      throw new CalcError("cannot read " + JSON.stringify(text.slice(at).trim().slice(0, 20)) + " (numbers, + - * / % ^ ! ( ) and sqrt only)");
    }
    at = re.lastIndex;
    if (m[1] !== undefined) tokens.push({ num: m[1], exp: m[2] });
    else if (m[3] !== undefined) tokens.push({ op: { "×": "*", "÷": "/", "−": "-", "**": "^" }[m[3]] || m[3] });
    else if (m[4].toLowerCase() === "sqrt") tokens.push({ op: "sqrt" });
    else throw new CalcError("unknown word " + JSON.stringify(m[4]) + " (numbers, + - * / % ^ ! ( ) and sqrt only)");
  }
  return tokens;
}

function number(tok) {
  const [int, dec = ""] = tok.num.split(".");
  let v = frac(BigInt((int || "0") + dec), 10n ** BigInt(dec.length));
  if (tok.exp !== undefined) v = mul(v, pow(frac(10n), frac(BigInt(tok.exp))));
  return v;
}

function parse(tokens, flags) {
  let i = 0;
  const peek = () => tokens[i] && tokens[i].op;
  const expect = (op) => {
    if (peek() !== op) throw new CalcError("expected " + JSON.stringify(op));
    i++;
  };
  function expr() {
    let v = term();
    while (peek() === "+" || peek() === "-") v = tokens[i++].op === "+" ? add(v, term()) : sub(v, term());
    return v;
  }
  function term() {
    let v = unary();
    while (["*", "/", "%"].includes(peek())) {
      const op = tokens[i++].op;
      const r = unary();
      v = op === "*" ? mul(v, r) : op === "/" ? div(v, r) : mod(v, r);
    }
    return v;
  }
  function unary() {
    if (peek() === "-") { i++; return mul(frac(-1n), unary()); }
    if (peek() === "+") { i++; return unary(); }
    return power();
  }
  function power() {
    const base = postfix();
    if (peek() === "^") { i++; return pow(base, unary()); }
    return base;
  }
  function postfix() {
    let v = atom();
    while (peek() === "!") { i++; v = factorial(v); }
    return v;
  }
  function atom() {
    const t = tokens[i];
    if (!t) throw new CalcError("the expression ends too early");
    if (t.num !== undefined) { i++; return number(t); }
    if (t.op === "(") { i++; const v = expr(); expect(")"); return v; }
    if (t.op === "sqrt") { i++; expect("("); const v = expr(); expect(")"); return sqrt(v, flags); }
    throw new CalcError("unexpected " + JSON.stringify(t.op));
  }
  const v = expr();
  if (i < tokens.length) throw new CalcError("unexpected " + JSON.stringify(tokens[i].op || tokens[i].num));
  return v;
}

/** The decimal expansion of a/b: exact when it ends, else DECIMALS significant digits and "…". */
function decimal(v) {
  const neg = v.n < 0n;
  let n = neg ? -v.n : v.n;
  const intPart = n / v.d;
  n %= v.d;
  let digits = "";
  let significant = intPart > 0n ? intPart.toString().length : 0;
  while (n && significant < DECIMALS) {
    n *= 10n;
    const q = n / v.d;
    digits += q.toString();
    if (q || significant) significant++;
    n %= v.d;
  }
  return (neg ? "-" : "") + intPart.toString() + (digits ? "." + digits : "") + (n ? "…" : "");
}

/** Evaluate `text`: {result, exact, fraction?}; throws CalcError with a plain reason. */
export function calculate(text) {
  if (typeof text !== "string" || !text.trim()) throw new CalcError("give an expression, e.g. 12 * (3 + 4)");
  if (text.length > MAX_INPUT) throw new CalcError("the expression is longer than " + MAX_INPUT + " characters");
  const flags = { inexact: false };
  const tokens = tokenize(text);
  if (!tokens.length) throw new CalcError("give an expression, e.g. 12 * (3 + 4)");
  const v = parse(tokens, flags);
  const out = { expression: text.trim(), result: v.d === 1n ? v.n.toString() : decimal(v), exact: !flags.inexact };
  if (v.d !== 1n && !flags.inexact) out.fraction = v.n.toString() + "/" + v.d.toString();
  if (flags.inexact) out.result = decimal(v).replace(/…$/, "") + "…";
  return out;
}
