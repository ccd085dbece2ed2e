// A TypeScriptToLua plugin: `not (a ~= b)` is printed `a == b`. It comes from
// `!t.has(k)` (a LuaTable's or LuaSet's has() is `t[k] ~= nil`), and reads as
// a double negation nobody writes by hand (luacheck flags it). In Lua `a ~= b`
// is defined as `not (a == b)` and `==` always yields a boolean, so the two
// are the same for every value, NaN and tables with __eq included.
const ts = require("typescript");
const lua = require("typescript-to-lua");

function negating(node, context) {
  const e = context.superTransformExpression(node);
  if (node.operator !== ts.SyntaxKind.ExclamationToken) return e;
  if (!lua.isUnaryExpression(e) || e.operator !== lua.SyntaxKind.NotOperator) return e;
  let inner = e.operand;
  while (lua.isParenthesizedExpression && lua.isParenthesizedExpression(inner)) inner = inner.expression;
  if (!lua.isBinaryExpression(inner) || inner.operator !== lua.SyntaxKind.InequalityOperator) return e;
  return lua.createBinaryExpression(inner.left, inner.right, lua.SyntaxKind.EqualityOperator, node);
}

/** @type {import("typescript-to-lua").Plugin} */
module.exports = {
  visitors: {
    [ts.SyntaxKind.PrefixUnaryExpression]: negating,
  },
};
