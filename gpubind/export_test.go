package gpubind

// The external tests (package gpubind_test) need these unexported parts: they cannot be
// internal tests, because they use tests/fixtures and gpubind/nvmlmock, which import
// gpubind. Nothing outside the tests sees these names.

type PlanInput = planInput

const PolicyHelp = policyHelp

var (
	BuildGresMap           = buildGresMap
	BuildTable             = buildTable
	BlockSizes             = blockSizes
	CompressHostlist       = compressHostlist
	ExpandHostlist         = expandHostlist
	Merge                  = merge
	NodeHasGPUGres         = nodeHasGPUGres
	NVLBlocks              = nvlBlocks
	ParseDriverVersion     = parseDriverVersion
	ParseGPUList           = parseGPUList
	ParseGresConf          = parseGresConf
	ParseNvidiaInformation = parseNvidiaInformation
	ResolveStep            = resolveStep
)
