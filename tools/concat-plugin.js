// A TypeScriptToLua plugin: a chain of string concatenations becomes one Lua
// concatenation. TypeScript's `a + b + c` nests to the left, and
// TypeScriptToLua prints it as `(a .. b) .. c`: two CAT instructions and an
// intermediate string that LuaJIT interns (hashes, and later collects) only to
// throw it away. Lua's `..` nests to the right, so `a .. b .. c` is one CAT of
// three slots, as hand-written Lua has it. The operands keep their order and
// are still evaluated left to right; `..` on strings and numbers is
// associative, so the value is the same.
const ts = require("typescript");
const lua = require("typescript-to-lua");

const CONCAT = lua.SyntaxKind.ConcatOperator;

function isConcat(e) {
  return lua.isBinaryExpression(e) && e.operator === CONCAT;
}

function operands(e, out) {
  if (isConcat(e)) {
    operands(e.left, out);
    operands(e.right, out);
  } else {
    out.push(e);
  }
  return out;
}

function flat(e, node) {
  if (!isConcat(e) || !isConcat(e.left)) return e;
  const parts = operands(e, []);
  let acc = parts[parts.length - 1];
  for (let i = parts.length - 2; i >= 0; i--) {
    acc = lua.createBinaryExpression(parts[i], acc, CONCAT, i === 0 ? node : undefined);
  }
  return acc;
}

function flattening(node, context) {
  return flat(context.superTransformExpression(node), node);
}

/** @type {import("typescript-to-lua").Plugin} */
module.exports = {
  visitors: {
    [ts.SyntaxKind.BinaryExpression]: flattening,
    [ts.SyntaxKind.TemplateExpression]: flattening,
  },
};
