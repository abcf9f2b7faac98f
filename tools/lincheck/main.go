// lincheck: checks a history of SET/GET/INCR operations on string keys for
// linearizability with porcupine (the checker Jepsen's Knossos inspired,
// used by etcd's and many Raft implementations' tests).
//
//	lincheck HISTORY.json
//
// The history is a JSON array of operations:
//
//	{"client": 3, "key": "k1", "op": "incr", "value": null, "output": 7,
//	 "call": 1200, "return": 1950, "ok": true}
//
// `call` and `return` are nanoseconds on one clock. `ok: false` marks an
// operation whose outcome the client could not learn (a timeout, a
// connection lost, a TRYAGAIN): it may or may not have taken effect, so it
// is given no return (it may be linearized at any point after its call)
// and its output is not checked. Operations known to have failed (a MOVED
// refusal) are left out by the recorder.
//
// Exit status: 0 linearizable, 1 not linearizable (the offending key is
// printed), 2 bad input, 3 the check timed out.
package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

type record struct {
	Client int    `json:"client"`
	Key    string `json:"key"`
	Op     string `json:"op"`
	Value  *int64 `json:"value"`
	Output *int64 `json:"output"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Ok     bool   `json:"ok"`
}

type input struct {
	key   string
	op    string
	value int64
}

type output struct {
	known   bool
	present bool
	value   int64
}

// A register's state: absent, or an integer.
type state struct {
	present bool
	value   int64
}

var model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(input).key
			if _, seen := byKey[k]; !seen {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return state{} },
	Step: func(s, in, out interface{}) (bool, interface{}) {
		st := s.(state)
		i := in.(input)
		o := out.(output)
		switch i.op {
		case "get":
			if !o.known {
				return true, st
			}
			return o.present == st.present && (!o.present || o.value == st.value), st
		case "set":
			return true, state{present: true, value: i.value}
		case "incr":
			next := state{present: true, value: st.value + 1}
			if !st.present {
				next.value = 1
			}
			if !o.known {
				return true, next
			}
			return o.present && o.value == next.value, next
		}
		return false, st
	},
	Equal: func(a, b interface{}) bool { return a.(state) == b.(state) },
	DescribeOperation: func(in, out interface{}) string {
		i := in.(input)
		o := out.(output)
		result := "?"
		if o.known {
			result = "nil"
			if o.present {
				result = fmt.Sprint(o.value)
			}
		}
		if i.op == "set" {
			return fmt.Sprintf("set(%s, %d)", i.key, i.value)
		}
		return fmt.Sprintf("%s(%s) -> %s", i.op, i.key, result)
	},
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: lincheck HISTORY.json")
		os.Exit(2)
	}
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var records []record
	if err := json.Unmarshal(raw, &records); err != nil {
		fmt.Fprintln(os.Stderr, "bad history:", err)
		os.Exit(2)
	}
	ops := make([]porcupine.Operation, 0, len(records))
	for _, r := range records {
		in := input{key: r.Key, op: r.Op}
		if r.Op != "get" && r.Op != "set" && r.Op != "incr" {
			fmt.Fprintln(os.Stderr, "unknown operation", r.Op)
			os.Exit(2)
		}
		if r.Op == "set" {
			if r.Value == nil {
				fmt.Fprintln(os.Stderr, "a set without a value")
				os.Exit(2)
			}
			in.value = *r.Value
		}
		out := output{known: r.Ok}
		if r.Output != nil {
			out.present = true
			out.value = *r.Output
		}
		ret := r.Return
		if !r.Ok {
			ret = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{
			ClientId: r.Client, Input: in, Call: r.Call, Output: out, Return: ret,
		})
	}
	result := porcupine.CheckOperationsTimeout(model, ops, 5*time.Minute)
	switch result {
	case porcupine.Ok:
		fmt.Printf("linearizable: %d operations\n", len(ops))
	case porcupine.Illegal:
		fmt.Printf("NOT linearizable: %d operations\n", len(ops))
		os.Exit(1)
	default:
		fmt.Println("the check timed out")
		os.Exit(3)
	}
}
