/*
 * nnbuild's ARM7TDMI block timing for OTAWA (processor nnbuild::arm7tdmi::BlockTime).
 *
 * OTAWA's pipeline XML gives each instruction kind one functional-unit latency; the ARM7TDMI's
 * times depend on the register list (LDM/STM), on writing the PC and on register-specified shifts,
 * which a kind cannot say. So nnbuild decodes the linked ELF itself (nnbuild/runners/
 * arm7tdmi_timing.py, the ARM7TDMI TRM's S/N/I cycles per class) and writes one "ADDRESS CYCLES"
 * line per instruction; this plugin sums them over each basic block of OTAWA's own CFG into
 * ipet::TIME, and OTAWA's IPET (with the flow facts) does the rest. The qemu-arm measurement
 * charges the same table. An instruction missing from the table stops the analysis: no default.
 *
 * nnbuild::arm7tdmi::WCETComputation replaces otawa::ipet::WCETComputation, which truncates the ILP
 * objective to an integer: lp_solve returns 361.99999999999994 for an optimum of 362 and OTAWA
 * reported 361, one cycle under a measured run. Here the objective is rounded to the nearest integer
 * and refused if it is not within 1e-6 of one (every cost and count is an integer).
 *
 * With nnbuild::arm7tdmi::BLOCKS_PATH set, BlockTime also writes where each block of OTAWA's CFGs
 * is ("B cfg index address" for a basic block, "S cfg index call-address callee" for a call
 * block); the script sets otawa::ipet::EXPLICIT, so the ILP names a block's count x<index>_<cfg>
 * and nnbuild can add its own constraints over those counts (nnbuild/wcet/otawa_paths.py).
 */

#include <elm/io/InStream.h>
#include <elm/io/InFileStream.h>
#include <elm/io/OutFileStream.h>
#include <elm/data/HashMap.h>
#include <otawa/cfg.h>
#include <otawa/ipet.h>
#include <otawa/proc/BBProcessor.h>
#include <otawa/proc/ProcessorPlugin.h>
#include <otawa/prog/Inst.h>
#include <otawa/ipet/features.h>
#include <otawa/ilp/System.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

namespace nnbuild { namespace arm7tdmi {

using namespace otawa;

extern p::id<elm::string> COSTS_PATH;
extern p::id<elm::string> ILP_PATH;
extern p::id<elm::string> BLOCKS_PATH;

class BlockTime: public BBProcessor {
public:
	static p::declare reg;
	BlockTime(p::declare& r = reg): BBProcessor(r) { }

	void configure(const PropList& props) override {
		BBProcessor::configure(props);
		path = COSTS_PATH(props);
		blocks_path = BLOCKS_PATH(props);
	}

protected:
	void setup(WorkSpace *) override {
		if(!path)
			throw ProcessorException(*this, "no cost table: set nnbuild::arm7tdmi::COSTS_PATH");
		FILE *f = std::fopen(path.toCString().chars(), "r");
		if(!f)
			throw ProcessorException(*this, _ << "cannot open the cost table " << path);
		unsigned long addr, cycles;
		while(std::fscanf(f, "%lx %lu", &addr, &cycles) == 2)
			costs[addr] = cycles;
		std::fclose(f);
		if(costs.empty())
			throw ProcessorException(*this, _ << "empty cost table " << path);
		if(blocks_path) {
			blocks = std::fopen(blocks_path.toCString().chars(), "w");
			if(!blocks)
				throw ProcessorException(*this, _ << "cannot write the block map " << blocks_path);
		}
	}

	void cleanup(WorkSpace *) override {
		if(blocks && std::fclose(blocks) != 0)
			throw ProcessorException(*this, _ << "cannot write the block map " << blocks_path);
		blocks = nullptr;
	}

	// a CFG OTAWA found no symbol for has an empty label (its counts are then x<index>_): "-"
	static elm::string label(CFG *cfg) {
		return cfg && cfg->label() ? cfg->label() : elm::string("-");
	}

	void mapBlock(CFG *cfg, Block *b) {
		if(!blocks)
			return;
		if(b->isBasic())
			std::fprintf(blocks, "B %s %d %lx\n", label(cfg).toCString().chars(), b->index(),
				(unsigned long)b->toBasic()->address().offset());
		else if(b->isCall()) {
			SynthBlock *s = b->toSynth();
			Inst *call = s->callInst();
			std::fprintf(blocks, "S %s %d %lx %s\n", label(cfg).toCString().chars(), b->index(),
				call ? (unsigned long)call->address().offset() : 0UL, label(s->callee()).toCString().chars());
		}
	}

	void processBB(WorkSpace *, CFG *cfg, Block *b) override {
		mapBlock(cfg, b);
		if(!b->isBasic()) {
			ipet::TIME(b) = 0;
			return;
		}
		ot::time time = 0;
		for(BasicBlock::InstIter i = b->toBasic()->insts(); i(); i++) {
			auto c = costs.find(i->address().offset());
			if(c == costs.end())
				throw ProcessorException(*this, _ << "no ARM7TDMI cost for the instruction at "
					<< i->address() << " (" << *i << ") in " << cfg->label());
			time += c->second;
		}
		ipet::TIME(b) = time;
	}

private:
	elm::string path;
	elm::string blocks_path;
	FILE *blocks = nullptr;
	std::map<unsigned long, unsigned long> costs;
};

p::declare BlockTime::reg = p::init("nnbuild::arm7tdmi::BlockTime", Version(1, 0, 0))
	.base(BBProcessor::reg)
	.maker<BlockTime>()
	.provide(ipet::BB_TIME_FEATURE);

class WCETComputation: public Processor {
public:
	static p::declare reg;
	WCETComputation(p::declare& r = reg): Processor(r) { }

	void configure(const PropList& props) override {
		Processor::configure(props);
		ilp_path = ILP_PATH(props);
	}

protected:
	void processWorkSpace(WorkSpace *ws) override {
		ilp::System *system = ipet::SYSTEM(ws);
		if(!system)
			throw ProcessorException(*this, "no ILP system");
		if(ilp_path) {
			// nnbuild solves it (HiGHS): lp_solve's branch and bound can run for hours
			elm::io::OutFileStream file(ilp_path.toCString().chars());
			if(!file.isReady())
				throw ProcessorException(*this, _ << "cannot write the ILP to " << ilp_path);
			system->dumpLPSolve(file);
			ipet::WCET(ws) = 0;   // not a bound: owcet prints 0, nnbuild reads the file
			return;
		}
		if(!system->solve(ws, *this))
			throw ProcessorException(*this, _ << "the ILP solver failed: " << system->lastErrorMessage());
		double value = system->value();
		double nearest = std::floor(value + 0.5);
		if(std::fabs(value - nearest) > 1e-6 * (std::fabs(value) > 1 ? std::fabs(value) : 1))
			throw ProcessorException(*this, _ << "the ILP objective " << value << " is not an integer");
		ipet::WCET(ws) = ot::time(nearest);
	}

private:
	elm::string ilp_path;
};

p::declare WCETComputation::reg = p::init("nnbuild::arm7tdmi::WCETComputation", Version(1, 0, 0))
	.require(ipet::CONTROL_CONSTRAINTS_FEATURE)
	.require(ipet::OBJECT_FUNCTION_FEATURE)
	.require(ipet::FLOW_FACTS_CONSTRAINTS_FEATURE)
	.require(ipet::FLOW_FACTS_CONFLICT_CONSTRAINTS_FEATURE)
	.provide(ipet::WCET_FEATURE)
	.maker<WCETComputation>();

p::id<elm::string> COSTS_PATH("nnbuild::arm7tdmi::COSTS_PATH", "");
p::id<elm::string> ILP_PATH("nnbuild::arm7tdmi::ILP_PATH", "");
p::id<elm::string> BLOCKS_PATH("nnbuild::arm7tdmi::BLOCKS_PATH", "");

ProcessorPlugin plugin = elm::sys::Plugin::make("nnbuild::arm7tdmi", OTAWA_PROC_VERSION)
	.version(Version(1, 0, 0))
	.hook(OTAWA_PROC_NAME);
ELM_PLUGIN(plugin, OTAWA_PROC_HOOK);

} }	// nnbuild::arm7tdmi
