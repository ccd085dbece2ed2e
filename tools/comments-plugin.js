// A TypeScriptToLua plugin: the source's `//` comments reach dist/.
// TypeScriptToLua keeps only doc comments (`/** */`, printed `---`); the `//`
// ones, which say why a line is as it is and what a module is for, were lost,
// and dist/ is read and reviewed like source. A statement's `//` comments
// (those on the lines above it) are printed above the first Lua statement it
// becomes; a statement that becomes none (a type, an interface, `import type`)
// takes its comments with it, as it takes its doc comment. A file's opening
// comment, up to the first blank line, is its header: the printer
// (module-table-plugin.js) prints it under the file's first line, where
// TypeScriptToLua would otherwise put it above the first `require`.
// Comments inside an expression, after a statement on its line, or at the end
// of a block have no statement to go with and are still dropped.
const ts = require("typescript");

const STATEMENTS = [
  ts.SyntaxKind.VariableStatement,
  ts.SyntaxKind.ExpressionStatement,
  ts.SyntaxKind.IfStatement,
  ts.SyntaxKind.ReturnStatement,
  ts.SyntaxKind.ForStatement,
  ts.SyntaxKind.ForOfStatement,
  ts.SyntaxKind.ForInStatement,
  ts.SyntaxKind.WhileStatement,
  ts.SyntaxKind.DoStatement,
  ts.SyntaxKind.BreakStatement,
  ts.SyntaxKind.ContinueStatement,
  ts.SyntaxKind.FunctionDeclaration,
  ts.SyntaxKind.ImportDeclaration,
  ts.SyntaxKind.ExportDeclaration,
  ts.SyntaxKind.SwitchStatement,
  ts.SyntaxKind.Block,
];

const SINGLE = ts.SyntaxKind.SingleLineCommentTrivia;
const NONE = { lines: [], end: 0 };

/** Does this stretch of whitespace hold a blank line? */
function blank(s) {
  return /\n[ \t]*\r?\n/.test(s);
}

/** The `//` comments that open file, up to the first blank line: its header (none if no blank line follows them). */
function header(file) {
  const text = file.text;
  const lines = [];
  let end = 0;
  for (const r of ts.getLeadingCommentRanges(text, 0) || []) {
    if (r.kind !== SINGLE || (lines.length > 0 && blank(text.slice(end, r.pos)))) break;
    lines.push(text.slice(r.pos + 2, r.end));
    end = r.end;
  }
  // Comments right above the first statement, with no blank line under them, are that statement's.
  const next = /\S/g;
  next.lastIndex = end;
  const found = next.exec(text);
  if (lines.length === 0 || !blank(text.slice(end, found ? found.index : text.length))) return NONE;
  return { lines, end };
}

const headers = new WeakMap();
function headerOf(file) {
  let h = headers.get(file);
  if (h === undefined) {
    h = header(file);
    headers.set(file, h);
  }
  return h;
}

function withComments(node, context) {
  const out = context.superTransformStatements(node);
  const original = ts.getOriginalNode(node);
  const file = original.getSourceFile && original.getSourceFile();
  if (out.length === 0 || file === undefined || original.pos < 0) return out;
  const text = file.text;
  const skip = headerOf(file).end;
  const before = [];
  const after = [];
  let sawDoc = false;
  for (const r of ts.getLeadingCommentRanges(text, original.pos) || []) {
    if (r.kind !== SINGLE) {
      if (text.startsWith("/**", r.pos)) sawDoc = true;
      continue;
    }
    if (r.pos < skip) continue;
    (sawDoc ? after : before).push(text.slice(r.pos + 2, r.end));
  }
  if (before.length === 0 && after.length === 0) return out;
  const first = out[0];
  first.leadingComments = [...before, ...(first.leadingComments || []), ...after];
  return out;
}

const visitors = {};
for (const kind of STATEMENTS) visitors[kind] = withComments;

/** @type {import("typescript-to-lua").Plugin} */
module.exports = { visitors, header: headerOf };
