// A TypeScriptToLua printer plugin: each module's table is `_M`, as in
// lua-resty-redis and every lua-resty library, where TypeScriptToLua names it
// `____exports`; and each module's first line names the file it came from
// (tsconfig's noHeader drops TypeScriptToLua's own line, its home page), so a
// reader of dist/ knows which file to change.
// Only the printed identifier changes: the module table is local to its
// file, so nothing outside can tell. A name `_M` of the source would be the
// module table's twin: the build stops on one.
const path = require("path");
const tstl = require("typescript-to-lua");
const comments = require("./comments-plugin");

const EXPORTS = "____exports";
const NAME = "_M";
const NGX_LOCAL = "ngx_";
/** Columns an argument list and its line's indent may take on one line (the call's name and parentheses come on top). */
const WIDTH = 90;

class ModulePrinter extends tstl.LuaPrinter {
  constructor(emitHost, program, fileName) {
    super(emitHost, program, fileName);
    const root = path.dirname(program.getCompilerOptions().configFilePath);
    this.header = `-- Generated from ${path.relative(root, fileName)} by TypeScriptToLua: edit that file, not this one.\n`;
    const source = program.getSourceFile(fileName);
    const opening = source ? comments.header(source).lines : [];
    // The source's opening comment (comments-plugin.js): what the module is for, under the line above.
    if (opening.length > 0) this.header += opening.map((c) => `--${lineText(c)}`).join("\n") + "\n";
  }

  print(file) {
    const result = super.print(file);
    return { ...result, code: this.header + result.code };
  }

  // A doc comment's blank line is "--", not "-- " (no trailing blanks in dist/);
  // @customName is a directive to TypeScriptToLua (the name `new`), not documentation.
  printStatement(statement) {
    const cs = statement.leadingComments;
    if (cs && cs.some(isDirective)) {
      const kept = cs.filter((c) => !isDirective(c));
      while (kept.length > 0 && typeof kept[kept.length - 1] === "string" && kept[kept.length - 1].trim() === "") kept.pop();
      statement.leadingComments = kept;
    }
    return super.printStatement(statement);
  }

  // A line comment whose text opens with [[ (or [=[) would read as a Lua block comment: a space first;
  // the modules it names are the .lua files of dist/.
  printComment(comment) {
    return super.printComment(typeof comment === "string" ? lineText(comment) : comment);
  }

  // An argument list on one line when it fits, as by hand: TypeScriptToLua puts
  // each argument on a line of its own once there are five or one is a call.
  printExpressionList(expressions) {
    if (expressions.length > 1 && !expressions.some((e) => tstl.isFunctionExpression(e))) {
      const printed = expressions.map((e) => this.printExpression(e));
      const text = printed.map(String).join(", ");
      if (!text.includes("\n") && this.currentIndent.length + text.length <= WIDTH) return this.joinChunksWithComma(printed);
    }
    return super.printExpressionList(expressions);
  }

  printIdentifier(expression) {
    if (expression.text === EXPORTS) return this.createSourceNode(expression, NAME);
    // `const ngx_ = ngx` (TypeScript cannot name a local after the global it reads) is Lua's `local ngx = ngx`.
    if (expression.text === NGX_LOCAL) return this.createSourceNode(expression, "ngx");
    if (expression.text === NAME) throw new Error(`${this.relativeSourcePath}: the name ${NAME} is the module table's (tools/module-table-plugin.js)`);
    return super.printIdentifier(expression);
  }
}

/**
 * A line comment's text as Lua reads it after "--": no trailing blanks, never
 * the opening of a block comment, and a module it names ("see queued.ts")
 * named by the file a reader of dist/ has beside it (queued.lua).
 */
function lineText(c) {
  const t = c.trimEnd().replace(/\b([\w./-]+)\.ts\b/g, "$1.lua");
  return /^\[=*\[/.test(t) ? " " + t : t;
}

function isDirective(c) {
  return typeof c === "string" && /^\s*@customName\b/.test(c);
}

/** @type {import("typescript-to-lua").Plugin} */
module.exports = {
  printer: (program, emitHost, fileName, file) => new ModulePrinter(emitHost, program, fileName).print(file),
};
