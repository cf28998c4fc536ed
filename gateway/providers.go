package gateway

// The providers a gateway's policy may name: package policy links no
// adapter by itself (a program links the SDKs it uses), and a gateway
// serves whatever its policy file declares, as it did before.
import (
	_ "github.com/retryhost/retryhost/provider/anthropic"
	_ "github.com/retryhost/retryhost/provider/bedrock"
	_ "github.com/retryhost/retryhost/provider/gemini"
)
