// Package docs holds sluice's documentation (the Markdown files beside
// this one). It has no code of its own. Its tests keep the documentation
// true: every Go code block of README.md and docs/ compiles (and the
// programs that say what they print do print it), every test the docs
// name exists, and no Markdown or Go file of the module cites a work
// item, session or finding by number.
package docs
