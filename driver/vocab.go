package driver

import "github.com/retryhost/retryhost/abi"

// The user-facing vocabulary of package abi, re-exported so that a program
// that drives models needs one import: the part kinds it switches on, the
// error classes its rules match, the finish reasons and the deadlines. They
// are aliases and copies of abi's constants (driver.KindTextDelta ==
// abi.KindTextDelta), so code written against either package mixes freely.
// Package abi stays the place of the wire codec and the plugin contract,
// which only plugin authors and hosts need.
type (
	// ErrorClass is what kind of failure an attempt was (see [OnClass]).
	ErrorClass = abi.ErrorClass
	// Reason is the unified finish reason (see [OnFinish]).
	Reason = abi.Reason
	// Deadline names one of the driver's deadlines (see [DeadlineError]).
	Deadline = abi.Deadline
	// ResponseMeta identifies a response: id, model id, timestamp.
	ResponseMeta = abi.ResponseMeta
	// ToolInfo describes a tool call or a tool's result.
	ToolInfo = abi.ToolInfo
	// File is a generated file, inline or by URL.
	File = abi.File
	// Source is a cited source.
	Source = abi.Source
	// Warning is a provider's warning about the request.
	Warning = abi.Warning
)

// The part kinds (see [Part]).
const (
	KindStreamStart    = abi.KindStreamStart
	KindResponseMeta   = abi.KindResponseMeta
	KindTextStart      = abi.KindTextStart
	KindTextDelta      = abi.KindTextDelta
	KindTextEnd        = abi.KindTextEnd
	KindReasoningStart = abi.KindReasoningStart
	KindReasoningDelta = abi.KindReasoningDelta
	KindReasoningEnd   = abi.KindReasoningEnd
	KindToolInputStart = abi.KindToolInputStart
	KindToolInputDelta = abi.KindToolInputDelta
	KindToolInputEnd   = abi.KindToolInputEnd
	KindToolCall       = abi.KindToolCall
	KindToolResult     = abi.KindToolResult
	KindFile           = abi.KindFile
	KindSource         = abi.KindSource
	KindFinish         = abi.KindFinish
	KindRaw            = abi.KindRaw
	KindError          = abi.KindError
)

// The error classes an attempt is sorted into (see [OnClass]).
const (
	ClassUnknown       = abi.ClassUnknown
	ClassTimeout       = abi.ClassTimeout
	ClassCanceled      = abi.ClassCanceled
	ClassRateLimit     = abi.ClassRateLimit
	ClassOverloaded    = abi.ClassOverloaded
	ClassServer        = abi.ClassServer
	ClassClient        = abi.ClassClient
	ClassAuth          = abi.ClassAuth
	ClassContextLength = abi.ClassContextLength
	ClassContentFilter = abi.ClassContentFilter
	ClassRefusal       = abi.ClassRefusal
	ClassNetwork       = abi.ClassNetwork
	ClassTransform     = abi.ClassTransform
	ClassPlugin        = abi.ClassPlugin
)

// The unified finish reasons (see [OnFinish]).
const (
	ReasonUnknown       = abi.ReasonUnknown
	ReasonStop          = abi.ReasonStop
	ReasonLength        = abi.ReasonLength
	ReasonContentFilter = abi.ReasonContentFilter
	ReasonToolCalls     = abi.ReasonToolCalls
	ReasonError         = abi.ReasonError
	ReasonOther         = abi.ReasonOther
	ReasonRefusal       = abi.ReasonRefusal
)

// The driver's deadlines (see [DeadlineError]).
const (
	DeadlineFirstContent = abi.DeadlineFirstContent
	DeadlineAttempt      = abi.DeadlineAttempt
	DeadlineTotal        = abi.DeadlineTotal
	DeadlineGap          = abi.DeadlineGap
)
