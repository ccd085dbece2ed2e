// The one place the release number lives: every public module re-exports it as
// _VERSION, and spec/packaging_spec.lua holds package.json, the rockspec,
// dist.ini and CHANGELOG.md to it.
export const VERSION = "0.1.0";
