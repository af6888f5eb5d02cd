package rocketmqtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// service implements the RocketMQ 5 MessagingService over a Broker.
type service struct {
	v2.UnimplementedMessagingServiceServer
	b *Broker
}

func clientID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-mq-client-id"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// messageQueue is topic's single queue as seen from the access point
// via, the endpoints a QueryRoute named (a RocketMQ proxy returns routes
// "in the perspective of the given endpoints"): a client that reached the
// peer through a TCP proxy keeps using that proxy. nil via: the peer's own
// address.
func (b *Broker) messageQueue(topicName string, via *v2.Endpoints) *v2.MessageQueue {
	if via == nil || len(via.GetAddresses()) == 0 {
		via = &v2.Endpoints{
			Scheme:    v2.AddressScheme_IPv4,
			Addresses: []*v2.Address{{Host: b.host, Port: int32(b.port)}},
		}
	}
	return &v2.MessageQueue{
		Topic:      &v2.Resource{Name: topicName},
		Id:         0,
		Permission: v2.Permission_READ_WRITE,
		Broker: &v2.Broker{
			Name:      "rocketmqtest",
			Id:        0,
			Endpoints: via,
		},
		AcceptMessageTypes: []v2.MessageType{v2.MessageType_NORMAL, v2.MessageType_DELAY, v2.MessageType_FIFO},
	}
}

func (s *service) QueryRoute(_ context.Context, req *v2.QueryRouteRequest) (*v2.QueryRouteResponse, error) {
	name := req.GetTopic().GetName()
	if name == "" {
		return &v2.QueryRouteResponse{Status: status(v2.Code_ILLEGAL_TOPIC, "topic name is empty")}, nil
	}
	s.b.mu.Lock()
	t := s.b.topicLocked(name, false)
	s.b.mu.Unlock()
	if t == nil {
		return &v2.QueryRouteResponse{Status: status(v2.Code_TOPIC_NOT_FOUND, "topic "+name+" not found")}, nil
	}
	return &v2.QueryRouteResponse{Status: okStatus, MessageQueues: []*v2.MessageQueue{s.b.messageQueue(name, req.GetEndpoints())}}, nil
}

func (s *service) QueryAssignment(_ context.Context, req *v2.QueryAssignmentRequest) (*v2.QueryAssignmentResponse, error) {
	name := req.GetTopic().GetName()
	s.b.mu.Lock()
	t := s.b.topicLocked(name, false)
	if t != nil && req.GetGroup().GetName() != "" {
		t.groupLocked(req.GetGroup().GetName())
	}
	s.b.mu.Unlock()
	if t == nil {
		return &v2.QueryAssignmentResponse{Status: status(v2.Code_TOPIC_NOT_FOUND, "topic "+name+" not found")}, nil
	}
	return &v2.QueryAssignmentResponse{Status: okStatus, Assignments: []*v2.Assignment{{MessageQueue: s.b.messageQueue(name, req.GetEndpoints())}}}, nil
}

func (s *service) Heartbeat(context.Context, *v2.HeartbeatRequest) (*v2.HeartbeatResponse, error) {
	return &v2.HeartbeatResponse{Status: okStatus}, nil
}

func (s *service) NotifyClientTermination(ctx context.Context, _ *v2.NotifyClientTerminationRequest) (*v2.NotifyClientTerminationResponse, error) {
	s.b.mu.Lock()
	delete(s.b.clients, clientID(ctx))
	s.b.mu.Unlock()
	return &v2.NotifyClientTerminationResponse{Status: okStatus}, nil
}

// Telemetry answers each Settings command with the server's settings of the
// same kind. A subscription's settings make its consumer group exist on
// each subscribed topic (from the topic's current end).
func (s *service) Telemetry(stream grpc.BidiStreamingServer[v2.TelemetryCommand, v2.TelemetryCommand]) error {
	id := clientID(stream.Context())
	for {
		cmd, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		settings := cmd.GetSettings()
		if settings == nil {
			continue // thread-stack and verify-message results: nothing to do
		}
		reply := &v2.Settings{
			ClientType:     settings.ClientType,
			AccessPoint:    settings.AccessPoint,
			RequestTimeout: settings.RequestTimeout,
		}
		switch p := settings.GetPubSub().(type) {
		case *v2.Settings_Publishing:
			reply.PubSub = &v2.Settings_Publishing{Publishing: &v2.Publishing{
				Topics:              p.Publishing.GetTopics(),
				MaxBodySize:         int32(s.b.maxBody),
				ValidateMessageType: false,
			}}
			// No BackoffPolicy: the v5 Go client (v5.1.4) writes it into its
			// settings without synchronisation while its heartbeat and
			// telemetry goroutines read them, a data race under -race. The
			// client keeps its own retry policy (WithMaxAttempts).
		case *v2.Settings_Subscription:
			sub := p.Subscription
			s.b.mu.Lock()
			if g := sub.GetGroup().GetName(); g != "" {
				for _, e := range sub.GetSubscriptions() {
					if t := s.b.topicLocked(e.GetTopic().GetName(), false); t != nil {
						t.groupLocked(g)
					}
				}
			}
			if lp := sub.GetLongPollingTimeout(); lp != nil && id != "" {
				s.b.clients[id] = clientSettings{longPolling: lp.AsDuration()}
			}
			s.b.mu.Unlock()
			reply.PubSub = &v2.Settings_Subscription{Subscription: sub}
		default:
			reply.PubSub = settings.PubSub
		}
		out := &v2.TelemetryCommand{
			Status:  okStatus,
			Command: &v2.TelemetryCommand_Settings{Settings: reply},
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

func (s *service) SendMessage(_ context.Context, req *v2.SendMessageRequest) (*v2.SendMessageResponse, error) {
	b := s.b
	if len(req.GetMessages()) == 0 {
		return &v2.SendMessageResponse{Status: status(v2.Code_BAD_REQUEST, "no messages")}, nil
	}
	for _, m := range req.GetMessages() {
		if err := b.faults.sendRefused(m.GetTopic().GetName()); err != nil {
			b.stats.refused.Add(1)
			return &v2.SendMessageResponse{Status: status(v2.Code_INTERNAL_SERVER_ERROR, err.Error())}, nil
		}
		if len(m.GetBody()) > b.maxBody {
			return &v2.SendMessageResponse{Status: status(v2.Code_MESSAGE_BODY_TOO_LARGE,
				fmt.Sprintf("message body is %d bytes, the limit is %d", len(m.GetBody()), b.maxBody))}, nil
		}
	}
	now := time.Now()
	entries := make([]*v2.SendResultEntry, 0, len(req.GetMessages()))
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, grpcstatus.Error(codes.Unavailable, "rocketmqtest: broker closed")
	}
	for _, pm := range req.GetMessages() {
		name := pm.GetTopic().GetName()
		t := b.topicLocked(name, false)
		if t == nil {
			return &v2.SendMessageResponse{Status: status(v2.Code_TOPIC_NOT_FOUND, "topic "+name+" not found")}, nil
		}
		sp := pm.GetSystemProperties()
		m := &message{
			id:       sp.GetMessageId(),
			topic:    name,
			body:     pm.GetBody(),
			props:    cloneProps(pm.GetUserProperties()),
			tag:      sp.Tag,
			keys:     sp.GetKeys(),
			msgGroup: sp.MessageGroup,
			born:     now,
			bornHost: sp.GetBornHost(),
			traceCtx: sp.TraceContext,
			msgType:  sp.GetMessageType(),
		}
		if m.id == "" {
			m.id = fmt.Sprintf("rocketmqtest-%d", b.offsets.Add(1))
		}
		if bt := sp.GetBornTimestamp(); bt != nil {
			m.born = bt.AsTime()
		}
		if dt := sp.GetDeliveryTimestamp(); dt != nil {
			m.deliverAt = dt.AsTime()
		}
		b.storeLocked(t, m)
		entries = append(entries, &v2.SendResultEntry{Status: okStatus, MessageId: m.id, Offset: m.offset})
	}
	return &v2.SendMessageResponse{Status: okStatus, Entries: entries}, nil
}

func (s *service) ReceiveMessage(req *v2.ReceiveMessageRequest, stream grpc.ServerStreamingServer[v2.ReceiveMessageResponse]) error {
	b := s.b
	ctx := stream.Context()
	groupName := req.GetGroup().GetName()
	topicName := req.GetMessageQueue().GetTopic().GetName()
	reply := func(st *v2.Status) error {
		return stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Status{Status: st}})
	}
	if groupName == "" {
		return reply(status(v2.Code_ILLEGAL_CONSUMER_GROUP, "consumer group is empty"))
	}
	if req.GetInvisibleDuration() == nil || req.GetInvisibleDuration().AsDuration() <= 0 {
		return reply(status(v2.Code_ILLEGAL_INVISIBLE_TIME, "invisible duration must be positive"))
	}
	invisible := req.GetInvisibleDuration().AsDuration()
	batch := int(req.GetBatchSize())
	if batch <= 0 {
		batch = 32
	}

	b.mu.Lock()
	t := b.topicLocked(topicName, false)
	if t == nil {
		b.mu.Unlock()
		return reply(status(v2.Code_TOPIC_NOT_FOUND, "topic "+topicName+" not found"))
	}
	g := t.groupLocked(groupName)
	poll := DefaultLongPolling
	if cs, ok := b.clients[clientID(ctx)]; ok && cs.longPolling > 0 {
		poll = cs.longPolling
	}
	b.mu.Unlock()
	if lp := req.GetLongPollingTimeout(); lp != nil && lp.AsDuration() > 0 {
		poll = lp.AsDuration()
	}
	deadline := time.Now().Add(poll)
	// End the long poll well before the call's own deadline: an answer
	// that arrives after it is DEADLINE_EXCEEDED at the client, and the
	// messages taken for it stay invisible. 50 ms was not enough on a
	// loaded machine (TestGroupsShareOrSplit failed so).
	if d, ok := ctx.Deadline(); ok && d.Add(-longPollMargin).Before(deadline) {
		deadline = d.Add(-longPollMargin)
	}

	for {
		now := time.Now()
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return grpcstatus.Error(codes.Unavailable, "rocketmqtest: broker closed")
		}
		got, next := b.takeLocked(g, batch, invisible, now)
		var msgs []*v2.Message
		if len(got) > 0 {
			msgs = make([]*v2.Message, len(got))
			for i, e := range got {
				msgs[i] = toProto(e, invisible)
			}
		}
		ch := g.notify
		b.mu.Unlock()
		if len(msgs) > 0 {
			b.stats.received.Add(int64(len(msgs)))
			if err := reply(okStatus); err != nil {
				return err
			}
			if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_DeliveryTimestamp{DeliveryTimestamp: timestamppb.New(now)}}); err != nil {
				return err
			}
			for _, m := range msgs {
				if err := stream.Send(&v2.ReceiveMessageResponse{Content: &v2.ReceiveMessageResponse_Message{Message: m}}); err != nil {
					return err // the messages stay invisible and come back when it expires
				}
			}
			return nil
		}
		if !time.Now().Before(deadline) || ctx.Err() != nil {
			return reply(status(v2.Code_MESSAGE_NOT_FOUND, "no new message"))
		}
		until := deadline
		if !next.IsZero() && next.Before(until) {
			until = next
		}
		ctxWait(ctx, ch, until)
	}
}

func toProto(e *entry, invisible time.Duration) *v2.Message {
	m := e.msg
	handle := e.handle
	attempt := e.attempts
	offset := m.offset
	sp := &v2.SystemProperties{
		Tag:               m.tag,
		Keys:              m.keys,
		MessageId:         m.id,
		BodyDigest:        &v2.Digest{Type: v2.DigestType_CRC32, Checksum: crc32Hex(m.body)},
		BodyEncoding:      v2.Encoding_IDENTITY,
		MessageType:       m.msgType,
		BornTimestamp:     timestamppb.New(m.born),
		BornHost:          m.bornHost,
		ReceiptHandle:     &handle,
		QueueId:           0,
		QueueOffset:       &offset,
		InvisibleDuration: durationpb.New(invisible),
		DeliveryAttempt:   &attempt,
		MessageGroup:      m.msgGroup,
		TraceContext:      m.traceCtx,
	}
	if !m.deliverAt.IsZero() {
		sp.DeliveryTimestamp = timestamppb.New(m.deliverAt)
	}
	if m.origTopic != "" {
		sp.DeadLetterQueue = &v2.DeadLetterQueue{Topic: m.origTopic, MessageId: m.id}
	}
	return &v2.Message{
		Topic:            &v2.Resource{Name: m.topic},
		UserProperties:   m.props,
		SystemProperties: sp,
		Body:             m.body,
	}
}

func (s *service) AckMessage(_ context.Context, req *v2.AckMessageRequest) (*v2.AckMessageResponse, error) {
	b := s.b
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	results := make([]*v2.AckMessageResultEntry, 0, len(req.GetEntries()))
	failed := 0
	var first *v2.Status
	for _, ae := range req.GetEntries() {
		g, e, st := b.lookupLocked(req.GetTopic().GetName(), req.GetGroup().GetName(), ae.GetReceiptHandle(), now)
		if st == nil {
			e.done = true
			delete(g.handles, e.handle)
			e.handle = ""
			g.trim()
			b.stats.acked.Add(1)
			st = okStatus
		} else {
			failed++
			b.stats.badHandles.Add(1)
			if first == nil {
				first = st
			}
		}
		results = append(results, &v2.AckMessageResultEntry{MessageId: ae.GetMessageId(), ReceiptHandle: ae.GetReceiptHandle(), Status: st})
	}
	top := okStatus
	switch {
	case failed == 0:
	case failed == len(results):
		top = first
	default:
		top = status(v2.Code_MULTIPLE_RESULTS, fmt.Sprintf("%d of %d entries failed", failed, len(results)))
	}
	return &v2.AckMessageResponse{Status: top, Entries: results}, nil
}

func (s *service) ChangeInvisibleDuration(_ context.Context, req *v2.ChangeInvisibleDurationRequest) (*v2.ChangeInvisibleDurationResponse, error) {
	b := s.b
	d := req.GetInvisibleDuration().AsDuration()
	if req.GetInvisibleDuration() == nil || d < 0 {
		return &v2.ChangeInvisibleDurationResponse{Status: status(v2.Code_ILLEGAL_INVISIBLE_TIME, "invisible duration must not be negative")}, nil
	}
	if d > 0 && b.faults.renewalRefused() {
		return &v2.ChangeInvisibleDurationResponse{Status: status(v2.Code_INTERNAL_SERVER_ERROR, "rocketmqtest: renewal refused by fault hook")}, nil
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	g, e, st := b.lookupLocked(req.GetTopic().GetName(), req.GetGroup().GetName(), req.GetReceiptHandle(), now)
	if st != nil {
		b.stats.badHandles.Add(1)
		return &v2.ChangeInvisibleDurationResponse{Status: st}, nil
	}
	delete(g.handles, e.handle)
	e.visibleAt = now.Add(d)
	if d == 0 {
		// Ready at once: the next receive redelivers it (attempt + 1).
		e.handle = ""
		b.watchLastAttemptLocked(g, e)
		g.wake()
		b.stats.changed.Add(1)
		return &v2.ChangeInvisibleDurationResponse{Status: okStatus, ReceiptHandle: ""}, nil
	}
	e.handle = b.newHandle(g, e)
	g.handles[e.handle] = e
	b.watchLastAttemptLocked(g, e)
	g.wake()
	b.stats.changed.Add(1)
	return &v2.ChangeInvisibleDurationResponse{Status: okStatus, ReceiptHandle: e.handle}, nil
}

func (s *service) ForwardMessageToDeadLetterQueue(_ context.Context, req *v2.ForwardMessageToDeadLetterQueueRequest) (*v2.ForwardMessageToDeadLetterQueueResponse, error) {
	b := s.b
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	g, e, st := b.lookupLocked(req.GetTopic().GetName(), req.GetGroup().GetName(), req.GetReceiptHandle(), now)
	if st != nil {
		b.stats.badHandles.Add(1)
		return &v2.ForwardMessageToDeadLetterQueueResponse{Status: st}, nil
	}
	b.deadLetterLocked(g, e)
	g.trim()
	return &v2.ForwardMessageToDeadLetterQueueResponse{Status: okStatus}, nil
}
