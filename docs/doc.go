// Package docs holds sluice's documentation (the Markdown files beside
// this one). It has no code of its own: its test compiles every Go code
// block of the top-level docs, so the guides cannot drift from the API.
package docs
