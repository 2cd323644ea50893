// Package profile holds the facts about PyTorch that change from one
// release to another, as data: which attention kernel nn.MultiheadAttention
// reaches, whether zero_grad frees gradients, which optimizer implementation
// is the default, how large the cuBLAS workspace is.
//
// The profiles live in profiles.json (embedded). A profile applies from its
// version up to the next one; Lookup("2.3") returns the newest profile whose
// version is not newer than 2.3. The default is the newest profile, which
// follows the current PyTorch release.
package profile
